// A GLFW window with an OpenGL 3 context and a Dear ImGui context bound to it: the viewer's only
// contact with the windowing system. Hidden windows render too (screenshots under Xvfb).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

struct GLFWwindow;

namespace sl::ui {

class GlWindow {
 public:
  // Throws sl::Error when no display can be opened (names DISPLAY and xvfb-run) or when the
  // OpenGL context cannot be created.
  GlWindow(int width, int height, const std::string& title, bool visible);
  ~GlWindow();
  GlWindow(const GlWindow&) = delete;
  GlWindow& operator=(const GlWindow&) = delete;

  bool should_close() const;
  // Takes the window system's events (waiting up to `wait_s` seconds for one when > 0, so that
  // an idle viewer does not spin), starts an ImGui frame.
  void begin_frame(double wait_s = 0);
  void end_frame();    // renders ImGui into the back buffer (not yet swapped)
  void present();      // swaps buffers
  // The back buffer as RGBA rows, top row first (call after end_frame, before present).
  std::vector<uint8_t> read_pixels(int& width, int& height) const;

 private:
  GLFWwindow* window_ = nullptr;
};

}  // namespace sl::ui
