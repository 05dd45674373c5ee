#include "ui/screenshot.h"

#include <stb/stb_image_write.h>

#include <cstdio>
#include <filesystem>

#include "core/error.h"

namespace sl::ui {

void write_png(const std::string& path, const std::vector<uint8_t>& rgba, int width, int height) {
  if (width <= 0 || height <= 0 || rgba.size() != size_t(width) * size_t(height) * 4)
    throw Error("screenshot " + path + ": " + std::to_string(rgba.size()) + " bytes for a " + std::to_string(width) +
                "x" + std::to_string(height) + " RGBA image");
  const std::string tmp = path + ".part";
  if (!stbi_write_png(tmp.c_str(), width, height, 4, rgba.data(), width * 4)) {
    std::remove(tmp.c_str());
    throw Error("screenshot " + path + ": cannot write the PNG (directory missing or not writable?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw Error("screenshot " + path + ": cannot rename " + tmp + ": " + ec.message());
  }
}

}  // namespace sl::ui
