// PNG files of the viewer's frames (stb_image_write), written to a temporary name and renamed,
// so that a failed write never leaves a half-written image under the requested name.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sl::ui {

// rgba: width * height * 4 bytes, top row first. Throws sl::Error naming the file on failure.
void write_png(const std::string& path, const std::vector<uint8_t>& rgba, int width, int height);

}  // namespace sl::ui
