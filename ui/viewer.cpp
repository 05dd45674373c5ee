#include "ui/viewer.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "core/error.h"
#include "ui/kernel_names.h"
#include "ui/row_layout.h"

namespace sl::ui {
namespace {

using L = TimelineLayout;

uint32_t shade(uint32_t abgr, float f) {  // scales r, g, b
  auto ch = [&](int shift) { return uint32_t(std::min(255.f, float((abgr >> shift) & 0xFF) * f)) << shift; };
  return (abgr & 0xFF000000u) | ch(0) | ch(8) | ch(16);
}

// Time relative to the time zero, as the ruler shows it.
std::string at(Ns t, Ns zero) { return format_duration(double(t - zero)); }

constexpr uint32_t kMemcpyColor = IM_COL32(214, 140, 40, 255);
constexpr uint32_t kMemsetColor = IM_COL32(150, 150, 150, 255);
constexpr uint32_t kApiColor = IM_COL32(90, 120, 170, 255);
constexpr float kTickSpacing = 90.f;  // pixels between ruler ticks, at least
constexpr uint32_t kTickColor = IM_COL32(200, 200, 200, 255);

}  // namespace

uint32_t name_color(std::string_view name) {
  // FNV-1a, then a hue; saturation and value fixed so that white text stays readable.
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ uint8_t(c)) * 16777619u;
  float r, g, b;
  ImGui::ColorConvertHSVtoRGB(float(h % 360u) / 360.f, 0.55f, 0.72f, r, g, b);
  return IM_COL32(int(r * 255), int(g * 255), int(b * 255), 255);
}

Viewer::Viewer(prof::Trace trace, std::string source, const TimelineOptions& opts)
    : trace_(std::move(trace)), source_(std::move(source)) {
  set_options(opts);
  fit();
  try {
    analysis_ = prof::analyze(trace_);
  } catch (const std::exception& e) {
    analysis_error_ = e.what();  // the timeline still works; the panels say why they are empty
  }
}

void Viewer::set_options(const TimelineOptions& opts) {
  options_ = opts;
  model_ = build_timeline(trace_, options_);
  // Time zero: the trace's base time (what our exports count from), unless it is unusable.
  zero_ = trace_.base_time != prof::kNoTime && trace_.base_time > 0 && trace_.base_time <= model_.begin
              ? trace_.base_time
              : model_.begin;
  selected_.reset();  // they point at tracks by index
  hovered_.reset();
  if (range_ && !selecting_) select_range(range_->a, range_->b);
  track_top_.clear();
  lanes_height_ = (model_.streams_busy.empty() ? 0.f : L::kLaneHeight + L::kTrackGap) +
                  (model_.memory.empty() ? 0.f : L::kLaneHeight + L::kTrackGap);
  float y = lanes_height_;
  for (const Track& t : model_.tracks) {
    track_top_.push_back(y);
    y += float(std::max<size_t>(1, t.rows.size())) * L::kRowHeight + L::kTrackGap;
  }
  track_top_.push_back(y);
}

std::string Viewer::where(const Item& it, const Track& track) const {
  // Grouped tracks hold several streams: name the item's own.
  if (track.kind == TrackKind::GpuStream && track.streams.size() > 1) {
    const uint32_t stream = it.kind == ItemKind::Kernel   ? trace_.kernels[it.index].stream
                            : it.kind == ItemKind::Memcpy ? trace_.memcpys[it.index].stream
                                                          : trace_.memsets[it.index].stream;
    return trace_.stream_label(stream) + " (stream " + std::to_string(stream) + ")";
  }
  return track.label;
}

float Viewer::row_top(size_t track, size_t row) const { return track_top_.at(track) + float(row) * L::kRowHeight; }

void Viewer::select_range(Ns a, Ns b) { range_ = range_stats(model_, trace_, a, b); }

std::string Viewer::item_name(const Item& it) const {
  switch (it.kind) {
    case ItemKind::Memcpy: {
      const auto& c = trace_.memcpys[it.index];
      return prof::memcpy_display_name(c.kind, c.src_kind, c.dst_kind);
    }
    case ItemKind::Memset: return prof::memset_display_name(trace_.memsets[it.index].mem_kind);
    case ItemKind::Api: return std::string(prof::strip_api_version(trace_.str(it.name)));
    default: return trace_.str(it.name);
  }
}

const std::string& Viewer::short_name(prof::StrId id) {
  auto it = short_names_.find(id);
  if (it == short_names_.end()) it = short_names_.emplace(id, short_kernel_name(trace_.str(id))).first;
  return it->second;
}

void Viewer::draw() {
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->WorkPos);
  ImGui::SetNextWindowSize(vp->WorkSize);
  ImGui::Begin("streamlab", nullptr,
               ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoMove |
                   ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoBringToFrontOnFocus |
                   ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
  draw_header();
  const float tracks_height = std::max(60.f, ImGui::GetContentRegionAvail().y - L::kRulerHeight - L::kPanelHeight);
  // The ruler is drawn after the tracks, over the space kept for it, so that it uses the
  // tracks' time axis of this frame (its width depends on the tracks' scrollbar).
  const float ruler_y = ImGui::GetCursorScreenPos().y;
  ImGui::Dummy(ImVec2(ImGui::GetContentRegionAvail().x, L::kRulerHeight));
  draw_tracks(tracks_height);
  draw_ruler(timeline_.x0, timeline_.x1, ruler_y);
  draw_panels();
  ImGui::End();
  if (log_) log_changes();
}

void Viewer::log_changes() {
  auto us = [&](Ns t) { return double(t - zero_) / 1e3; };
  auto rel_us = [&](double rel) { return (rel - window_.rel(zero_)) / 1e3; };
  if (!logged_layout_) {
    logged_layout_ = true;
    std::fprintf(log_, "view: trace %.3f .. %.3f us\n", us(model_.begin), us(model_.end));
    std::fprintf(log_, "view: axis x %.1f .. %.1f, tracks top %.1f\n", timeline_.x0, timeline_.x1, timeline_.y0);
    for (size_t i = 0; i < model_.tracks.size(); ++i)
      std::fprintf(log_, "view: track %zu rows %zu top %.1f %s\n", i, model_.tracks[i].rows.size(), track_top_[i],
                   model_.tracks[i].label.c_str());
  }
  if (window_.t0 != logged_window_.t0 || window_.t1 != logged_window_.t1 || window_.origin != logged_window_.origin) {
    logged_window_ = window_;
    std::fprintf(log_, "view: window %.3f .. %.3f us\n", rel_us(window_.t0), rel_us(window_.t1));
  }
  std::optional<std::pair<ItemKind, uint32_t>> sel;
  if (selected_) sel = std::make_pair(selected_->item.kind, selected_->item.index);
  if (sel != logged_selection_) {
    logged_selection_ = sel;
    if (selected_) {
      const Item& it = selected_->item;
      std::fprintf(log_, "view: selected %s %.3f .. %.3f us on track %zu: %s\n", to_string(it.kind), us(it.start),
                   us(it.end), selected_->track, item_name(it).c_str());
    } else {
      std::fprintf(log_, "view: selected nothing\n");
    }
  }
  if (selecting_ != logged_selecting_) {  // where a right drag started (scripts wait for it)
    logged_selecting_ = selecting_;
    if (selecting_) std::fprintf(log_, "view: selecting from %.3f us\n", us(select_from_));
  }
  std::optional<std::pair<Ns, Ns>> range;
  if (range_ && !selecting_) range = std::make_pair(range_->a, range_->b);
  if (range != logged_range_) {
    logged_range_ = range;
    if (range)
      std::fprintf(log_, "view: range %.3f .. %.3f us, kernels busy %.3f us, overlap across streams %.3f us\n",
                   us(range_->a), us(range_->b), double(range_->gpu_busy) / 1e3, double(range_->stream_overlap) / 1e3);
  }
  std::fflush(log_);
}

void Viewer::draw_header() {
  ImGui::Text("%s   %llu events, %llu on the timeline, %zu tracks, span %s", source_.c_str(),
              (unsigned long long)trace_.event_count(), (unsigned long long)model_.items, model_.tracks.size(),
              format_duration(double(model_.end - model_.begin)).c_str());
  if (ImGui::Button("Fit (F)")) fit();
  ImGui::SameLine();
  const double mid = 0.5 * (window_.t0 + window_.t1), max_span = 1.2 * double(std::max<Ns>(1, model_.end - model_.begin));
  if (ImGui::Button("Zoom in")) window_.zoom(2.0, mid, max_span);
  ImGui::SameLine();
  if (ImGui::Button("Zoom out")) window_.zoom(0.5, mid, max_span);
  ImGui::SameLine();
  bool by_role = options_.group_streams_by_role;
  if (ImGui::Checkbox("streams by role", &by_role)) {
    TimelineOptions o = options_;
    o.group_streams_by_role = by_role;
    set_options(o);
  }
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("one track per stream role (aux0, aux1, ...) instead of per stream: per-layer streams in one lane");
  ImGui::SameLine();
  ImGui::Text("window %s .. %s (%s)   wheel: zoom, left drag: pan, right drag: select a range, click: select",
              format_duration(window_.t0 - window_.rel(zero_)).c_str(),
              format_duration(window_.t1 - window_.rel(zero_)).c_str(),
              format_duration(window_.span()).c_str());
  if (analysis_) {
    const auto& w = analysis_->whole;
    size_t with_work = 0;  // streams that ran something: those on the timeline
    for (const Track& t : model_.tracks) with_work += t.streams.size();
    ImGui::Text("kernels %llu, busy %s, overlap across streams %s (%.1f%% of busy), aux kernels hidden under main %.1f%%, "
                "main stream: %s; streams: %llu in the trace, %zu with GPU work",
                (unsigned long long)w.kernels, format_duration(double(w.busy)).c_str(),
                format_duration(double(w.stream_overlap)).c_str(), 100.0 * w.stream_overlap_fraction,
                100.0 * w.aux_hidden_fraction, trace_.stream_label(analysis_->main_stream).c_str(),
                (unsigned long long)analysis_->resources.streams, with_work);
  } else {
    ImGui::Text("analysis unavailable: %s", analysis_error_.c_str());
  }
}

void Viewer::draw_ruler(float x0, float x1, float y) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float w = x1 - x0;
  if (w <= 0) return;
  dl->AddRectFilled(ImVec2(x0, y), ImVec2(x1, y + L::kRulerHeight), IM_COL32(30, 30, 34, 255));
  ruler_ = Rect{x0, y, x1, y + L::kRulerHeight};
  const double step = tick_step(window_.span(), w, kTickSpacing);
  // Ticks at multiples of `step` from the time zero, labelled relative to it (k * step, not a
  // running sum: labels stay exact multiples, "1.00 ms" and not "1000 us"). At most one tick
  // per kTickSpacing pixels, whatever the arithmetic says.
  const double base = window_.rel(zero_);
  const double k0 = std::ceil((window_.t0 - base) / step);
  for (int i = 0; i <= int(w / kTickSpacing) + 1; ++i) {
    const double k = k0 + i, t = base + k * step;
    if (!(t < window_.t1)) break;
    const float x = x0 + float(window_.x_of(t, w));
    dl->AddLine(ImVec2(x, y + L::kRulerHeight - 8), ImVec2(x, y + L::kRulerHeight), kTickColor);
    dl->AddText(ImVec2(x + 3, y + 2), kTickColor, format_duration(k * step).c_str());
  }
}

void Viewer::draw_tracks(float height) {
  ImGui::BeginChild("tracks", ImVec2(0, height), false,
                    ImGuiWindowFlags_NoScrollWithMouse | ImGuiWindowFlags_AlwaysVerticalScrollbar);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();  // top-left of the content, scrolled
  const float view_top = ImGui::GetWindowPos().y, view_bottom = view_top + ImGui::GetWindowHeight();
  const float axis_x0 = origin.x + L::kHeaderWidth;
  const float axis_width = std::max(1.f, ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x - axis_x0);
  timeline_ = Rect{axis_x0, origin.y, axis_x0 + axis_width, view_bottom};
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const bool hovered = ImGui::IsWindowHovered();
  hovered_.reset();
  std::optional<std::pair<uint32_t, float>> hovered_cluster;  // items, total time in ns

  dl->PushClipRect(ImVec2(origin.x, view_top), ImVec2(axis_x0 + axis_width, view_bottom), true);
  std::optional<std::pair<const char*, int64_t>> lane_value;  // hovered lane and its value there
  {
    float top = origin.y;
    if (!model_.streams_busy.empty()) {
      if (auto v = draw_series_lane(model_.streams_busy, "streams busy", top, axis_x0, axis_width, true))
        lane_value = std::make_pair("streams running kernels", *v);
      top += L::kLaneHeight + L::kTrackGap;
    }
    if (!model_.memory.empty())
      if (auto v = draw_series_lane(model_.memory, "memory allocated", top, axis_x0, axis_width, false))
        lane_value = std::make_pair("bytes allocated", *v);
  }
  for (size_t ti = 0; ti < model_.tracks.size(); ++ti) {
    const Track& track = model_.tracks[ti];
    const float top = origin.y + track_top_[ti], bottom = origin.y + track_top_[ti + 1] - L::kTrackGap;
    if (bottom < view_top || top > view_bottom) continue;  // only what is visible is laid out
    dl->AddRectFilled(ImVec2(origin.x, top), ImVec2(axis_x0 + axis_width, bottom),
                      ti % 2 ? IM_COL32(26, 26, 30, 255) : IM_COL32(33, 33, 38, 255));
    dl->AddText(ImVec2(origin.x + 4, top + 2), IM_COL32(230, 230, 230, 255), track.label.c_str());
    dl->PushClipRect(ImVec2(axis_x0, top), ImVec2(axis_x0 + axis_width, bottom), true);
    for (size_t ri = 0; ri < track.rows.size(); ++ri) {
      const Row& row = track.rows[ri];
      const float y0 = top + float(ri) * L::kRowHeight + 1, y1 = y0 + L::kRowHeight - 2;
      if (y1 < view_top || y0 > view_bottom) continue;
      for (const Box& b : layout_row(row, window_, axis_width)) {
        const Item& first = row.items[b.first];
        uint32_t color = first.kind == ItemKind::Memcpy   ? kMemcpyColor
                         : first.kind == ItemKind::Memset ? kMemsetColor
                         : first.kind == ItemKind::Api    ? kApiColor
                                                          : name_color(trace_.str(first.name));
        if (first.kind == ItemKind::Nvtx && trace_.nvtx[first.index].color != 0) {
          const uint32_t argb = trace_.nvtx[first.index].color;  // NVTX colors are ARGB
          color = IM_COL32((argb >> 16) & 0xFF, (argb >> 8) & 0xFF, argb & 0xFF, 255);
        }
        if (b.count > 1) color = shade(color, 0.6f);  // a cluster: darker, as Tracy does
        const ImVec2 a(axis_x0 + b.x0, y0), c(axis_x0 + b.x1, y1);
        dl->AddRectFilled(a, c, color);
        if (b.count == 1 && selected_ && selected_->track == ti && selected_->item.kind == first.kind &&
            selected_->item.index == first.index)
          dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(c.x + 1, c.y + 1), IM_COL32(255, 255, 255, 255), 0, 0, 2.f);
        if (b.count == 1 && b.x1 - b.x0 > 24) {
          const std::string& label = first.kind == ItemKind::Kernel ? short_name(first.name) : item_name(first);
          dl->PushClipRect(a, c, true);
          dl->AddText(ImVec2(a.x + 3, a.y + 1), IM_COL32(255, 255, 255, 255), label.c_str());
          dl->PopClipRect();
        }
        if (hovered && mouse.y >= y0 && mouse.y < y1 && mouse.x >= a.x && mouse.x < c.x) {
          if (b.count == 1) {
            hovered_ = Selected{ti, first};
          } else {
            Ns total = 0;
            for (uint32_t k = 0; k < b.count; ++k) total += row.items[b.first + k].end - row.items[b.first + k].start;
            hovered_cluster = std::make_pair(b.count, float(total));
          }
        }
      }
    }
    dl->PopClipRect();
  }
  if (selected_) draw_launch_flow(origin.y, axis_x0, axis_width);
  // The selected range, shaded over the tracks.
  if (range_) {
    const float xa = axis_x0 + float(std::clamp(window_.x_of_ns(range_->a, axis_width), 0.0, double(axis_width)));
    const float xb = axis_x0 + float(std::clamp(window_.x_of_ns(range_->b, axis_width), 0.0, double(axis_width)));
    dl->AddRectFilled(ImVec2(xa, view_top), ImVec2(std::max(xb, xa + 1), view_bottom), IM_COL32(120, 170, 255, 50));
  }
  if (hovered && mouse.x >= axis_x0)
    dl->AddLine(ImVec2(mouse.x, view_top), ImVec2(mouse.x, view_bottom), IM_COL32(255, 255, 255, 70));
  dl->PopClipRect();
  ImGui::Dummy(ImVec2(L::kHeaderWidth + axis_width, track_top_.back()));

  if (lane_value) {
    ImGui::BeginTooltip();
    ImGui::Text("%s: at most %lld in this pixel column", lane_value->first, (long long)lane_value->second);
    ImGui::EndTooltip();
  } else if (hovered_) {
    item_tooltip(hovered_->item, model_.tracks[hovered_->track]);
  } else if (hovered_cluster) {
    ImGui::BeginTooltip();
    ImGui::Text("%u items too narrow to draw apart, %s in all: zoom in", hovered_cluster->first,
                format_duration(hovered_cluster->second).c_str());
    ImGui::EndTooltip();
  }
  handle_input(axis_x0, axis_width, hovered);
  ImGui::EndChild();
}

std::optional<size_t> Viewer::row_of(size_t track, const Item& it) const {
  // By start and identity: item_at would miss zero-length items (marks, empty kernels).
  const auto& rows = model_.tracks[track].rows;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& items = rows[r].items;
    auto i = std::lower_bound(items.begin(), items.end(), it.start, [](const Item& x, Ns t) { return x.start < t; });
    for (; i != items.end() && i->start == it.start; ++i)
      if (i->kind == it.kind && i->index == it.index) return r;
  }
  return std::nullopt;
}

uint32_t Viewer::launch_call(const Item& it) {
  uint32_t corr = 0, pid = 0;
  if (it.kind == ItemKind::Kernel) corr = trace_.kernels[it.index].correlation, pid = trace_.kernels[it.index].pid;
  else if (it.kind == ItemKind::Memcpy) corr = trace_.memcpys[it.index].correlation, pid = trace_.memcpys[it.index].pid;
  else if (it.kind == ItemKind::Memset) corr = trace_.memsets[it.index].correlation, pid = trace_.memsets[it.index].pid;
  if (corr == 0) return prof::kNoId;
  if (!launches_) launches_ = std::make_unique<prof::LaunchIndex>(trace_);
  return launches_->find(pid, corr);
}

void Viewer::draw_launch_flow(float origin_y, float x0, float width) {
  // The selected GPU item's launch: a line from the end of its launch call to its start (the
  // launch delay), and for kernels with latency timestamps a bar under the kernel's row from
  // the time it was queued to its start (the queue wait).
  const Item& it = selected_->item;
  const auto row = row_of(selected_->track, it);
  if (it.kind == ItemKind::Nvtx || it.kind == ItemKind::Api || !row) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float y_item = origin_y + row_top(selected_->track, *row) + 1;
  const float x_start = x0 + float(window_.x_of_ns(it.start, width));
  if (it.kind == ItemKind::Kernel && trace_.kernels[it.index].queued != prof::kNoTime) {
    const float xq = x0 + float(window_.x_of_ns(trace_.kernels[it.index].queued, width));
    const float yb = y_item + L::kRowHeight - 4;
    dl->AddRectFilled(ImVec2(xq, yb), ImVec2(std::max(x_start, xq + 1), yb + 3), IM_COL32(255, 220, 120, 255));
  }
  const uint32_t li = launch_call(it);
  if (li == prof::kNoId) return;
  const auto& call = trace_.api_calls[li];
  for (size_t ti = 0; ti < model_.tracks.size(); ++ti) {
    const Track& t = model_.tracks[ti];
    if (t.kind != TrackKind::HostApi || t.id != call.tid || t.pid != call.pid) continue;
    const auto call_row = row_of(ti, Item{call.start, call.end, call.name, li, ItemKind::Api});
    if (!call_row) return;
    const float y_call = origin_y + row_top(ti, *call_row) + L::kRowHeight / 2;
    const float x_call = x0 + float(window_.x_of_ns(call.end, width));
    const ImVec2 from(x_call, y_call), to(x_start, y_item);
    dl->AddLine(from, to, IM_COL32(255, 255, 255, 200), 1.5f);
    dl->AddCircleFilled(to, 3.f, IM_COL32(255, 255, 255, 220));
    return;
  }
}

std::optional<int64_t> Viewer::draw_series_lane(const StepSeries& s, const char* label, float top, float x0,
                                                float width, bool levels) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float bottom = top + L::kLaneHeight;
  dl->AddRectFilled(ImVec2(x0 - L::kHeaderWidth, top), ImVec2(x0 + width, bottom), IM_COL32(24, 28, 36, 255));
  char text[96];
  if (levels)
    std::snprintf(text, sizeof text, "%s (max %lld)", label, (long long)s.peak);
  else
    std::snprintf(text, sizeof text, "%s (peak %.1f MiB)", label, double(s.peak) / 1048576.0);
  dl->AddText(ImVec2(x0 - L::kHeaderWidth + 4, top + 2), IM_COL32(230, 230, 230, 255), text);
  // Streams busy: 1 gray, 2 orange, 3 or more red; the bar's height is the value's share of
  // the peak. Memory: one color.
  auto color = [&](int64_t v) {
    if (!levels) return IM_COL32(90, 170, 110, 255);
    return v <= 1 ? IM_COL32(110, 120, 140, 255) : v == 2 ? IM_COL32(230, 150, 40, 255) : IM_COL32(220, 60, 50, 255);
  };
  const double peak = double(std::max<int64_t>(1, s.peak));
  const int columns = int(width);
  int64_t run_value = 0;
  int run_start = 0;
  auto flush = [&](int end_column) {
    if (run_value <= 0) return;
    const float h = float(double(run_value) / peak) * (L::kLaneHeight - 4);
    dl->AddRectFilled(ImVec2(x0 + float(run_start), bottom - 2 - h), ImVec2(x0 + float(end_column), bottom - 2),
                      color(run_value));
  };
  std::optional<int64_t> under_mouse;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const bool mouse_in = ImGui::IsWindowHovered() && mouse.y >= top && mouse.y < bottom && mouse.x >= x0;
  for (int c = 0; c < columns; ++c) {
    const Ns a = window_.ns_at(double(c), double(width)), b = std::max(a + 1, window_.ns_at(double(c + 1), double(width)));
    const int64_t v = s.max_over(a, b);
    if (mouse_in && int(mouse.x - x0) == c) under_mouse = v;
    if (v != run_value) {
      flush(c);
      run_value = v;
      run_start = c;
    }
  }
  flush(columns);
  return under_mouse;
}

void Viewer::handle_input(float axis_x0, float axis_width, bool hovered) {
  ImGuiIO& io = ImGui::GetIO();
  if (!ImGui::IsMousePosValid()) {  // the window lost the mouse: end a range drag where it was
    selecting_ = false;
    if (range_ && range_->tracks.empty() && range_->b > range_->a) select_range(range_->a, range_->b);
    return;
  }
  const double max_span = 1.2 * double(std::max<Ns>(1, model_.end - model_.begin));
  const double mouse_t = window_.t_of(double(io.MousePos.x - axis_x0), axis_width);
  if (hovered && io.MouseWheel != 0.f) {
    if (io.KeyShift)  // shift + wheel scrolls the tracks
      ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * 3 * L::kRowHeight);
    else
      window_.zoom(std::pow(1.25, double(io.MouseWheel)), mouse_t, max_span);
  }
  if (hovered && ImGui::IsMouseDragging(ImGuiMouseButton_Left)) {
    window_.pan_pixels(double(io.MouseDelta.x), axis_width);
    ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseDelta.y);
  }
  window_.keep_near(window_.rel(model_.begin), window_.rel(model_.end));
  // A click (released without dragging) selects the item under the cursor, or clears.
  if (hovered && ImGui::IsMouseReleased(ImGuiMouseButton_Left) &&
      ImGui::GetMouseDragDelta(ImGuiMouseButton_Left, 0.f).x == 0.f &&
      ImGui::GetMouseDragDelta(ImGuiMouseButton_Left, 0.f).y == 0.f)
    selected_ = hovered_;
  if (hovered && ImGui::IsMouseClicked(ImGuiMouseButton_Right) && io.MousePos.x >= axis_x0) {
    selecting_ = true;
    select_from_ = window_.ns_at(double(io.MousePos.x - axis_x0), axis_width);
  }
  if (selecting_) {
    const Ns mouse_ns = window_.ns_at(double(io.MousePos.x - axis_x0), axis_width);
    const Ns a = std::min(select_from_, mouse_ns), b = std::max(select_from_, mouse_ns);
    if (ImGui::IsMouseReleased(ImGuiMouseButton_Right)) {
      selecting_ = false;
      if (b > a) select_range(a, b);
    } else if (b > a) {
      range_ = RangeStats{a, b, {}, {}, 0, 0};  // shaded while dragging; statistics on release
    }
  }
  // 'f' fits the window; read as a typed character, which does not depend on the backend's key
  // codes (ImGui 1.86 names no key F).
  if (ImGui::IsWindowFocused(ImGuiFocusedFlags_RootAndChildWindows))
    for (ImWchar c : io.InputQueueCharacters)
      if (c == 'f' || c == 'F') fit();
}

void Viewer::item_tooltip(const Item& it, const Track& track) const {
  ImGui::BeginTooltip();
  ImGui::PushTextWrapPos(700.f);
  ImGui::TextUnformatted(item_name(it).c_str());
  ImGui::PopTextWrapPos();
  ImGui::Text("%s on %s", to_string(it.kind), where(it, track).c_str());
  ImGui::Text("start %s, duration %s", at(it.start, zero_).c_str(), format_duration(double(it.end - it.start)).c_str());
  if (it.kind == ItemKind::Kernel) {
    const auto& k = trace_.kernels[it.index];
    ImGui::Text("grid (%u, %u, %u), block (%u, %u, %u), %u registers", k.grid[0], k.grid[1], k.grid[2], k.block[0],
                k.block[1], k.block[2], k.registers);
  }
  ImGui::EndTooltip();
}

void Viewer::draw_panels() {
  if (!ImGui::BeginTabBar("panels")) return;
  if (ImGui::BeginTabItem("Selection")) {
    ImGui::BeginChild("selection");
    draw_item_details();
    ImGui::Separator();
    draw_range_stats();
    ImGui::EndChild();
    ImGui::EndTabItem();
  }
  if (ImGui::BeginTabItem("Kernels")) {
    draw_kernel_table();
    ImGui::EndTabItem();
  }
  if (ImGui::BeginTabItem("Streams")) {
    draw_stream_table();
    ImGui::EndTabItem();
  }
  ImGui::EndTabBar();
}

void Viewer::draw_item_details() {
  if (!selected_) {
    ImGui::TextDisabled("click an item on the timeline to see it here");
    return;
  }
  const Item& it = selected_->item;
  ImGui::TextWrapped("%s", item_name(it).c_str());
  ImGui::Text("%s on %s: start %s, end %s, duration %s", to_string(it.kind),
              where(it, model_.tracks[selected_->track]).c_str(),
              at(it.start, zero_).c_str(), at(it.end, zero_).c_str(),
              format_duration(double(it.end - it.start)).c_str());
  if (it.kind == ItemKind::Kernel) {
    const auto& k = trace_.kernels[it.index];
    ImGui::Text("grid (%u, %u, %u), block (%u, %u, %u), %u registers, shared memory %u B static + %u B dynamic, "
                "correlation %u%s",
                k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2], k.registers, k.static_smem,
                k.dynamic_smem, k.correlation, k.graph_id ? ", graph node" : "");
    if (k.queued != prof::kNoTime && k.submitted != prof::kNoTime)
      ImGui::Text("queued %s before start, submitted %s before start", format_duration(double(k.start - k.queued)).c_str(),
                  format_duration(double(k.start - k.submitted)).c_str());
  } else if (it.kind == ItemKind::Memcpy) {
    const auto& c = trace_.memcpys[it.index];
    const double ns = double(std::max<Ns>(1, c.end - c.start));
    ImGui::Text("%llu bytes, %.1f GB/s", (unsigned long long)c.bytes, double(c.bytes) / ns);
  } else if (it.kind == ItemKind::Api) {
    ImGui::Text("correlation %u, return value %d", trace_.api_calls[it.index].correlation,
                trace_.api_calls[it.index].return_value);
  }
  {  // the launch call, found by correlation id
    const uint32_t li = launch_call(it);
    if (li != prof::kNoId) {
      const auto& a = trace_.api_calls[li];
      ImGui::Text("launched by %s at %s on thread %u; launch end to start: %s",
                  std::string(prof::strip_api_version(trace_.str(a.name))).c_str(), at(a.start, zero_).c_str(),
                  a.tid, format_duration(double(it.start - a.end)).c_str());
    }
  }
}

void Viewer::draw_range_stats() {
  if (!range_ || selecting_) {
    ImGui::TextDisabled("right-drag on the timeline to select a time range");
    return;
  }
  const RangeStats& r = *range_;
  const double len = double(std::max<Ns>(1, r.b - r.a));
  ImGui::Text("range %s .. %s (%s): kernels busy %s (%.1f%%), overlap across streams %s (%.1f%% of busy)",
              at(r.a, zero_).c_str(), at(r.b, zero_).c_str(), format_duration(len).c_str(),
              format_duration(double(r.gpu_busy)).c_str(), 100.0 * double(r.gpu_busy) / len,
              format_duration(double(r.stream_overlap)).c_str(),
              r.gpu_busy ? 100.0 * double(r.stream_overlap) / double(r.gpu_busy) : 0.0);
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp;
  if (ImGui::BeginTable("range_tracks", 3, flags)) {
    ImGui::TableSetupColumn("track");
    ImGui::TableSetupColumn("items");
    ImGui::TableSetupColumn("busy");
    ImGui::TableHeadersRow();
    for (const TrackTime& t : r.tracks) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(model_.tracks[t.track].label.c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%llu", (unsigned long long)t.items);
      ImGui::TableNextColumn();
      ImGui::Text("%s (%.1f%%)", format_duration(double(t.busy)).c_str(), 100.0 * double(t.busy) / len);
    }
    ImGui::EndTable();
  }
  if (ImGui::BeginTable("range_kernels", 3, flags)) {
    ImGui::TableSetupColumn("kernel", ImGuiTableColumnFlags_WidthStretch, 4.f);
    ImGui::TableSetupColumn("count");
    ImGui::TableSetupColumn("time in range");
    ImGui::TableHeadersRow();
    for (size_t i = 0; i < std::min<size_t>(r.kernels.size(), 50); ++i) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(short_kernel_name(r.kernels[i].name).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%llu", (unsigned long long)r.kernels[i].count);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_duration(double(r.kernels[i].time)).c_str());
    }
    ImGui::EndTable();
  }
}

bool Viewer::begin_analysis_table(const char* id, std::initializer_list<const char*> headers) {
  if (!analysis_) {
    ImGui::TextDisabled("%s", analysis_error_.c_str());
    return false;
  }
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_SizingStretchProp;
  if (!ImGui::BeginTable(id, int(headers.size()), flags)) return false;
  ImGui::TableSetupScrollFreeze(0, 1);  // the header row stays while the rows scroll
  for (const char* h : headers) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  return true;
}

void Viewer::draw_kernel_table() {
  if (!begin_analysis_table("kernels", {"kernel", "count", "total", "mean", "median", "max"})) return;
  for (const auto& k : analysis_->kernel_stats) {  // by total time, descending
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(short_kernel_name(k.name).c_str());
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", k.name.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%llu", (unsigned long long)k.count);
    for (double v : {double(k.total), k.mean, k.median, double(k.max)}) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_duration(v).c_str());
    }
  }
  ImGui::EndTable();
}

void Viewer::draw_stream_table() {
  if (!begin_analysis_table("streams", {"stream", "priority", "kernels", "busy", "overlapped", "host wait",
                                        "kernel wait", "queue wait p50"}))
    return;
  for (const auto& s : analysis_->streams) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("%s%s", s.label.c_str(), s.is_main ? " (main)" : "");
    ImGui::TableNextColumn();
    ImGui::Text("%d", s.priority);
    ImGui::TableNextColumn();
    ImGui::Text("%llu", (unsigned long long)s.kernels);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(format_duration(double(s.busy)).c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%.1f%%", 100.0 * s.overlap_fraction);
    for (double v : {double(s.idle_host_wait), double(s.idle_kernel_wait), s.queue_wait.median}) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_duration(v).c_str());
    }
  }
  ImGui::EndTable();
}

}  // namespace sl::ui
