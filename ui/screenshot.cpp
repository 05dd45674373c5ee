#include "ui/screenshot.h"

#include <stb/stb_image_write.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"

namespace sl::ui {

void write_png(const std::string& path, const std::vector<uint8_t>& rgba, int width, int height) {
  if (width <= 0 || height <= 0 || rgba.size() != size_t(width) * size_t(height) * 4)
    throw Error("screenshot " + path + ": " + std::to_string(rgba.size()) + " bytes for a " + std::to_string(width) +
                "x" + std::to_string(height) + " RGBA image");
  // Encoded in memory, then written and closed with every result checked (stbi_write_png
  // itself ignores fwrite's and fclose's): a full disk fails here, not as a cut-off PNG.
  std::vector<unsigned char> png;
  auto append = [](void* ctx, void* data, int size) {
    auto* out = static_cast<std::vector<unsigned char>*>(ctx);
    out->insert(out->end(), static_cast<unsigned char*>(data), static_cast<unsigned char*>(data) + size);
  };
  if (!stbi_write_png_to_func(append, &png, width, height, 4, rgba.data(), width * 4) || png.empty())
    throw Error("screenshot " + path + ": PNG encoding failed");
  // write_file_atomic refuses a device node or a missing folder as the destination and leaves
  // the destination as it was when writing fails.
  try {
    write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
  } catch (const Error& e) {
    throw Error(std::string("screenshot: ") + e.what());
  }
}

}  // namespace sl::ui
