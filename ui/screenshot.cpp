#include "ui/screenshot.h"

#include <stb/stb_image_write.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

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
  const std::string tmp = path + ".part";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error("screenshot " + path + ": cannot write " + tmp + ": " + std::strerror(errno));
  const bool written = std::fwrite(png.data(), 1, png.size(), f) == png.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    std::remove(tmp.c_str());
    throw Error("screenshot " + path + ": cannot write " + tmp + ": " + std::strerror(written ? errno : write_errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw Error("screenshot " + path + ": cannot rename " + tmp + ": " + ec.message());
  }
}

}  // namespace sl::ui
