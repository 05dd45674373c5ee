#include "ui/gl_window.h"

#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace sl::ui {
namespace {
std::string g_glfw_error;
void on_glfw_error(int code, const char* what) { g_glfw_error = std::to_string(code) + ": " + (what ? what : "?"); }
}  // namespace

GlWindow::GlWindow(int width, int height, const std::string& title, bool visible) {
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    const char* display = std::getenv("DISPLAY");
    throw Error("viewer: cannot open a window (GLFW: " + g_glfw_error + "); DISPLAY is " +
                (display ? std::string("'") + display + "'" : std::string("unset")) +
                ": run it on a desktop, or headless as `xvfb-run -a streamlab view ...`");
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  glfwWindowHint(GLFW_VISIBLE, visible ? GLFW_TRUE : GLFW_FALSE);
  window_ = glfwCreateWindow(width, height, title.c_str(), nullptr, nullptr);
  if (!window_) {
    std::string why = g_glfw_error;
    glfwTerminate();
    throw Error("viewer: cannot create a " + std::to_string(width) + "x" + std::to_string(height) +
                " window with an OpenGL 3.0 context (GLFW: " + why + ")");
  }
  glfwMakeContextCurrent(window_);
  glfwSwapInterval(1);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // no imgui.ini left in the user's directory
  ImGui::StyleColorsDark();
  ImGui_ImplGlfw_InitForOpenGL(window_, true);
  ImGui_ImplOpenGL3_Init("#version 130");
}

GlWindow::~GlWindow() {
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window_);
  glfwTerminate();
}

bool GlWindow::should_close() const { return glfwWindowShouldClose(window_); }

void GlWindow::begin_frame(double wait_s) {
  if (wait_s > 0)
    glfwWaitEventsTimeout(wait_s);
  else
    glfwPollEvents();
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  ImGui::NewFrame();
}

void GlWindow::end_frame() {
  ImGui::Render();
  int w = 0, h = 0;
  glfwGetFramebufferSize(window_, &w, &h);
  glViewport(0, 0, w, h);
  glClearColor(0.08f, 0.08f, 0.09f, 1.f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

void GlWindow::present() { glfwSwapBuffers(window_); }

std::vector<uint8_t> GlWindow::read_pixels(int& width, int& height) const {
  glfwGetFramebufferSize(window_, &width, &height);
  std::vector<uint8_t> px(size_t(width) * size_t(height) * 4);
  glFinish();
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width, height, GL_RGBA, GL_UNSIGNED_BYTE, px.data());
  // OpenGL's rows start at the bottom; images start at the top.
  const size_t stride = size_t(width) * 4;
  for (int y = 0; y < height / 2; ++y)
    std::swap_ranges(px.begin() + ptrdiff_t(size_t(y) * stride), px.begin() + ptrdiff_t(size_t(y + 1) * stride),
                     px.begin() + ptrdiff_t(size_t(height - 1 - y) * stride));
  return px;
}

}  // namespace sl::ui
