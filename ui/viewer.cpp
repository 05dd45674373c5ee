// The viewer's timeline: construction, layout, the ruler, the tracks of every block, input and
// the event log. The header and the panels below are in viewer_panels.cpp.
#include "ui/viewer.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/error.h"
#include "profiler/kernel_roles.h"
#include "ui/kernel_names.h"
#include "ui/row_layout.h"
#include "ui/ruler.h"

namespace sl::ui {
namespace {

using L = TimelineLayout;

uint32_t shade(uint32_t abgr, float f) {  // scales r, g, b
  auto ch = [&](int shift) { return uint32_t(std::min(255.f, float((abgr >> shift) & 0xFF) * f)) << shift; };
  return (abgr & 0xFF000000u) | ch(0) | ch(8) | ch(16);
}

constexpr uint32_t kMemcpyColor = IM_COL32(214, 140, 40, 255);
constexpr uint32_t kMemsetColor = IM_COL32(150, 150, 150, 255);
constexpr uint32_t kApiColor = IM_COL32(90, 120, 170, 255);
constexpr float kTickSpacing = 90.f;  // pixels between ruler ticks, at least
constexpr uint32_t kTickColor = IM_COL32(200, 200, 200, 255);
// A/B block headers: A blue, B orange, as the block's name in the panels.
constexpr uint32_t kBlockColors[2] = {IM_COL32(60, 110, 190, 255), IM_COL32(200, 120, 40, 255)};

}  // namespace

uint32_t name_color(std::string_view name) {
  // FNV-1a, then a hue; saturation and value fixed so that white text stays readable.
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ uint8_t(c)) * 16777619u;
  float r, g, b;
  ImGui::ColorConvertHSVtoRGB(float(h % 360u) / 360.f, 0.55f, 0.72f, r, g, b);
  return IM_COL32(int(r * 255), int(g * 255), int(b * 255), 255);
}

Viewer::Viewer(prof::Trace trace, std::string source, const TimelineOptions& opts) {
  blocks_.resize(1);
  blocks_[0].trace = std::move(trace);
  blocks_[0].source = std::move(source);
  set_options(opts);
  blocks_[0].zero = blocks_[0].start = ui::time_zero(blocks_[0].trace, blocks_[0].model);
  fit();
  load_block(blocks_[0]);
}

Viewer::Viewer(prof::Trace a, std::string source_a, prof::Trace b, std::string source_b,
               const CompareOptions& compare, TimelineOptions opts) {
  mode_ = Mode::AB;
  blocks_.resize(2);
  blocks_[0].name.assign(1, 'A');  // not = "A": GCC 12 warns about that (-Wrestrict, a false positive)
  blocks_[1].name.assign(1, 'B');
  blocks_[0].trace = std::move(a), blocks_[1].trace = std::move(b);
  blocks_[0].source = std::move(source_a), blocks_[1].source = std::move(source_b);
  opts.standard_role_order = true;
  set_options(opts);
  align_ = compare.align ? compare.align : default_alignment(blocks_[0].trace, blocks_[1].trace);
  for (TraceBlock& blk : blocks_) {
    blk.start = ui::time_zero(blk.trace, blk.model);
    blk.zero = align_ ? alignment_point(blk.trace, blk.source, *align_) : blk.start;
    blk.offset = blk.zero - blocks_[0].zero;
  }
  alignment_ = align_ ? to_string(*align_) : "";
  fit();
  for (TraceBlock& blk : blocks_) load_block(blk);
}

Viewer::Viewer(std::vector<RankTrace> ranks, TimelineOptions opts) {
  SL_CHECK(!ranks.empty(), "viewer: no traces");
  for (const RankTrace& r : ranks)
    SL_CHECK(r.trace.rank >= 0, r.source, ": the trace names no rank (distributedInfo); set one with streamlab export "
             "--to kineto --rank R --world-size W");
  std::stable_sort(ranks.begin(), ranks.end(),
                   [](const RankTrace& a, const RankTrace& b) { return a.trace.rank < b.trace.rank; });
  for (size_t i = 1; i < ranks.size(); ++i)
    SL_CHECK(ranks[i].trace.rank != ranks[i - 1].trace.rank, ranks[i - 1].source, " and ", ranks[i].source,
             " are both rank ", ranks[i].trace.rank, ": give one trace per rank");
  mode_ = Mode::Ranks;
  blocks_.resize(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    blocks_[i].name = "rank " + std::to_string(ranks[i].trace.rank);
    blocks_[i].trace = std::move(ranks[i].trace);
    blocks_[i].source = std::move(ranks[i].source);
  }
  opts.standard_role_order = true;  // the ranks' streams listed alike
  set_options(opts);
  // One clock: time 0 is the earliest start of any rank, and no block is shifted.
  Ns zero = 0;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i].start = ui::time_zero(blocks_[i].trace, blocks_[i].model);
    zero = i == 0 ? blocks_[i].start : std::min(zero, blocks_[i].start);
  }
  for (TraceBlock& blk : blocks_) blk.zero = zero;
  fit();
  for (TraceBlock& blk : blocks_) load_block(blk);
}

void Viewer::load_block(TraceBlock& b) {
  try {
    if (!ab()) {
      b.analysis = prof::analyze(b.trace);
      return;
    }
    // Steps are instances of the range the view aligns at (the role statistics do not depend
    // on it; the step paths do).
    prof::ProfileOptions po;
    if (align_) po.roles.step_range = std::string(prof::strip_instance_number(align_->name));
    b.profile = prof::profile_trace(b.trace, po);
  } catch (const std::exception& e) {
    b.analysis_error = e.what();  // the timeline still works; the panels say why they are empty
  }
}

void Viewer::set_options(const TimelineOptions& opts) {
  options_ = opts;
  for (TraceBlock& b : blocks_) b.model = build_timeline(b.trace, options_);
  selected_.reset();  // they point at tracks by index
  hovered_.reset();
  if (selection_ && !selecting_) select_range(selection_->first, selection_->second);
  relayout();
}

void Viewer::relayout() {
  float y = 0;
  for (TraceBlock& b : blocks_) {
    b.top = y;
    if (stacked()) y += L::kBlockHeaderHeight;
    b.lanes_top = y;
    y += (b.model.streams_busy.empty() ? 0.f : L::kLaneHeight + L::kTrackGap) +
         (b.model.memory.empty() ? 0.f : L::kLaneHeight + L::kTrackGap);
    b.track_top.clear();
    for (const Track& t : b.model.tracks) {
      b.track_top.push_back(y);
      y += float(std::max<size_t>(1, t.rows.size())) * L::kRowHeight + L::kTrackGap;
    }
    b.track_top.push_back(y);
  }
  content_height_ = y;
}

TimeWindow Viewer::block_window(size_t b) const {
  return TimeWindow{window_.t0, window_.t1, window_.origin + blocks_[b].offset};
}

std::pair<Ns, Ns> Viewer::extent() const {
  std::optional<std::pair<Ns, Ns>> e;
  for (const TraceBlock& b : blocks_) {
    if (b.model.items == 0) continue;
    const Ns s = b.model.begin - b.offset, t = b.model.end - b.offset;
    e = e ? std::make_pair(std::min(e->first, s), std::max(e->second, t)) : std::make_pair(s, t);
  }
  return e ? *e : std::make_pair(blocks_[0].model.begin, blocks_[0].model.end);
}

void Viewer::fit() {
  const auto [begin, end] = extent();
  window_ = fit_window(begin, end);
}

size_t Viewer::first_track(size_t block) const {
  size_t n = 0;
  for (size_t i = 0; i < block; ++i) n += blocks_[i].model.tracks.size();
  return n;
}

float Viewer::row_top(size_t track, size_t row) const {
  for (const TraceBlock& b : blocks_) {
    if (track < b.model.tracks.size()) return b.track_top[track] + float(row) * L::kRowHeight;
    track -= b.model.tracks.size();
  }
  throw std::out_of_range("row_top: no track " + std::to_string(track));
}

void Viewer::select_range(Ns a, Ns b) {
  selection_ = std::make_pair(std::min(a, b), std::max(a, b));
  for (TraceBlock& blk : blocks_)
    blk.range = range_stats(blk.model, blk.trace, selection_->first + blk.offset, selection_->second + blk.offset);
  diff_.reset();
  if (ab() && blocks_[0].profile && blocks_[1].profile) {
    auto side = [&](const TraceBlock& blk) {
      return RangeSide{&blk.trace, &*blk.profile, selection_->first + blk.offset, selection_->second + blk.offset};
    };
    diff_ = ui::range_diff(side(blocks_[0]), side(blocks_[1]));
  }
}

std::string Viewer::at(const TraceBlock& b, Ns t) const { return format_instant(double(t - b.zero)); }

std::string Viewer::item_name(const TraceBlock& b, const Item& it) const {
  switch (it.kind) {
    case ItemKind::Memcpy: {
      const auto& c = b.trace.memcpys[it.index];
      return prof::memcpy_display_name(c.kind, c.src_kind, c.dst_kind);
    }
    case ItemKind::Memset: return prof::memset_display_name(b.trace.memsets[it.index].mem_kind);
    case ItemKind::Api: return std::string(prof::strip_api_version(b.trace.str(it.name)));
    default: return b.trace.str(it.name);
  }
}

std::string Viewer::where(const TraceBlock& b, const Item& it, const Track& track) const {
  // Grouped tracks hold several streams: name the item's own.
  if (track.kind == TrackKind::GpuStream && track.streams.size() > 1) {
    const uint32_t stream = it.kind == ItemKind::Kernel   ? b.trace.kernels[it.index].stream
                            : it.kind == ItemKind::Memcpy ? b.trace.memcpys[it.index].stream
                                                          : b.trace.memsets[it.index].stream;
    return b.trace.stream_label(stream) + " (stream " + std::to_string(stream) + ")";
  }
  return track.label;
}

const std::string& Viewer::short_name(TraceBlock& b, prof::StrId id) {
  auto it = b.short_names.find(id);
  if (it == b.short_names.end()) it = b.short_names.emplace(id, short_kernel_name(b.trace.str(id))).first;
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

void Viewer::log_layout() {
  const TraceBlock& a = blocks_[0];
  auto us = [&](Ns t) { return double(t - a.zero) / 1e3; };
  const auto [begin, end] = extent();
  std::fprintf(log_, "view: trace %.3f .. %.3f us\n", us(begin), us(end));
  std::fprintf(log_, "view: axis x %.1f .. %.1f, tracks top %.1f\n", timeline_.x0, timeline_.x1, timeline_.y0);
  size_t g = 0;  // tracks numbered over all blocks
  for (const TraceBlock& b : blocks_) {
    if (ranks())
      std::fprintf(log_, "view: block %s top %.1f tracks %zu: %s, starts %.3f us after time 0\n", b.name.c_str(), b.top,
                   b.model.tracks.size(), b.source.c_str(), double(b.start - b.zero) / 1e3);
    else if (ab())
      std::fprintf(log_, "view: block %s top %.1f tracks %zu: %s, aligned at %s, %.3f us after its start\n",
                   b.name.c_str(), b.top, b.model.tracks.size(), b.source.c_str(),
                   alignment_.empty() ? "its start" : alignment_.c_str(), double(b.zero - b.start) / 1e3);
    for (size_t i = 0; i < b.model.tracks.size(); ++i, ++g)
      std::fprintf(log_, "view: track %zu rows %zu top %.1f %s\n", g, b.model.tracks[i].rows.size(), b.track_top[i],
                   b.model.tracks[i].label.c_str());
  }
}

void Viewer::log_changes() {
  if (!logged_layout_) {
    logged_layout_ = true;
    log_layout();
  }
  auto rel_us = [&](double rel) { return (rel - window_.rel(time_zero())) / 1e3; };
  if (window_.t0 != logged_window_.t0 || window_.t1 != logged_window_.t1 || window_.origin != logged_window_.origin) {
    logged_window_ = window_;
    std::fprintf(log_, "view: window %.3f .. %.3f us\n", rel_us(window_.t0), rel_us(window_.t1));
  }
  std::optional<std::tuple<size_t, ItemKind, uint32_t>> sel;
  if (selected_) sel = std::make_tuple(selected_->block, selected_->item.kind, selected_->item.index);
  if (sel != logged_selection_) {
    logged_selection_ = sel;
    if (selected_) {
      const TraceBlock& b = blocks_[selected_->block];
      const Item& it = selected_->item;
      std::fprintf(log_, "view: selected %s %.3f .. %.3f us on track %zu: %s\n", to_string(it.kind),
                   double(it.start - b.zero) / 1e3, double(it.end - b.zero) / 1e3,
                   first_track(selected_->block) + selected_->track, item_name(b, it).c_str());
    } else {
      std::fprintf(log_, "view: selected nothing\n");
    }
  }
  if (selecting_ != logged_selecting_) {  // where a right drag started (scripts wait for it)
    logged_selecting_ = selecting_;
    if (selecting_) std::fprintf(log_, "view: selecting from %.3f us\n", double(select_from_ - time_zero()) / 1e3);
  }
  log_range();
  // The tabs, once ImGui has laid them out (a tab bar places its tabs a frame after they come).
  if (!logged_tabs_ && !tabs_.empty() &&
      std::all_of(tabs_.begin(), tabs_.end(), [](const auto& t) { return t.second.x1 > t.second.x0; })) {
    logged_tabs_ = true;
    for (const auto& [name, r] : tabs_)
      std::fprintf(log_, "view: tab %s x %.1f .. %.1f y %.1f .. %.1f\n", name.c_str(), r.x0, r.x1, r.y0, r.y1);
  }
  if (open_tab_ != logged_tab_) {
    logged_tab_ = open_tab_;
    std::fprintf(log_, "view: panel %s\n", open_tab_.c_str());
  }
  std::fflush(log_);
}

void Viewer::log_range() {
  std::optional<std::pair<Ns, Ns>> range;
  if (blocks_[0].range && !selecting_) range = std::make_pair(blocks_[0].range->a, blocks_[0].range->b);
  if (range == logged_range_) return;
  logged_range_ = range;
  if (!range) return;
  auto stats = [](const RangeStats& r) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "kernels busy %.3f us, overlap across streams %.3f us", double(r.gpu_busy) / 1e3,
                  double(r.stream_overlap) / 1e3);
    return std::string(buf);
  };
  const RangeStats& a = *blocks_[0].range;
  std::fprintf(log_, "view: range %.3f .. %.3f us, %s", double(a.a - time_zero()) / 1e3,
               double(a.b - time_zero()) / 1e3, stats(a).c_str());
  for (size_t i = 1; ranks() && i < blocks_.size(); ++i)
    std::fprintf(log_, "; %s: %s", blocks_[i].name.c_str(), stats(*blocks_[i].range).c_str());
  if (ab()) {
    std::fprintf(log_, "; B: %s", stats(*blocks_[1].range).c_str());
    if (diff_)
      std::fprintf(log_, "; roles %zu (%llu only in A, %llu only in B)", diff_->rows.size(),
                   (unsigned long long)diff_->roles_only_a, (unsigned long long)diff_->roles_only_b);
  }
  std::fprintf(log_, "\n");
}

void Viewer::draw_ruler(float x0, float x1, float y) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float w = x1 - x0;
  if (w <= 0) return;
  dl->AddRectFilled(ImVec2(x0, y), ImVec2(x1, y + L::kRulerHeight), IM_COL32(30, 30, 34, 255));
  ruler_ = Rect{x0, y, x1, y + L::kRulerHeight};
  const double char_px = ImGui::CalcTextSize("0").x;
  for (const Tick& t : ruler_ticks(window_, time_zero(), w, kTickSpacing, char_px)) {
    const float x = x0 + float(t.x);
    dl->AddLine(ImVec2(x, y + L::kRulerHeight - 8), ImVec2(x, y + L::kRulerHeight), kTickColor);
    dl->AddText(ImVec2(x + 3, y + 2), kTickColor, t.label.c_str());
  }
}

void Viewer::draw_tracks(float height) {
  ImGui::BeginChild("tracks", ImVec2(0, height), false,
                    ImGuiWindowFlags_NoScrollWithMouse | ImGuiWindowFlags_AlwaysVerticalScrollbar);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  Frame f;
  const ImVec2 origin = ImGui::GetCursorScreenPos();  // top-left of the content, scrolled
  f.origin_x = origin.x, f.origin_y = origin.y;
  f.view_top = ImGui::GetWindowPos().y, f.view_bottom = f.view_top + ImGui::GetWindowHeight();
  f.axis_x0 = origin.x + L::kHeaderWidth;
  f.axis_width = std::max(1.f, ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x - f.axis_x0);
  timeline_ = Rect{f.axis_x0, origin.y, f.axis_x0 + f.axis_width, f.view_bottom};
  f.mouse_x = ImGui::GetIO().MousePos.x, f.mouse_y = ImGui::GetIO().MousePos.y;
  f.hovered = ImGui::IsWindowHovered();
  hovered_.reset();

  dl->PushClipRect(ImVec2(origin.x, f.view_top), ImVec2(f.axis_x0 + f.axis_width, f.view_bottom), true);
  for (size_t b = 0; b < blocks_.size(); ++b) draw_block(b, f);
  if (selected_) draw_launch_flow(f);
  // The selected range, shaded over the tracks (all blocks: one time axis).
  if (selection_) {
    auto x_of = [&](Ns t) {
      return f.axis_x0 + float(std::clamp(window_.x_of_ns(t, f.axis_width), 0.0, double(f.axis_width)));
    };
    const float xa = x_of(selection_->first), xb = x_of(selection_->second);
    dl->AddRectFilled(ImVec2(xa, f.view_top), ImVec2(std::max(xb, xa + 1), f.view_bottom), IM_COL32(120, 170, 255, 50));
  }
  if (f.hovered && f.mouse_x >= f.axis_x0)
    dl->AddLine(ImVec2(f.mouse_x, f.view_top), ImVec2(f.mouse_x, f.view_bottom), IM_COL32(255, 255, 255, 70));
  dl->PopClipRect();
  ImGui::Dummy(ImVec2(L::kHeaderWidth + f.axis_width, content_height_));

  if (f.lane_value) {
    ImGui::BeginTooltip();
    ImGui::Text("%s: at most %lld in this pixel column", f.lane_value->first, (long long)f.lane_value->second);
    ImGui::EndTooltip();
  } else if (hovered_) {
    item_tooltip(*hovered_);
  } else if (f.cluster) {
    ImGui::BeginTooltip();
    ImGui::Text("%u items too narrow to draw apart, %s in all: zoom in", f.cluster->first,
                format_duration(f.cluster->second).c_str());
    ImGui::EndTooltip();
  }
  handle_input(f.axis_x0, f.axis_width, f.hovered);
  ImGui::EndChild();
}

void Viewer::draw_block(size_t b, Frame& f) {
  const TraceBlock& blk = blocks_[b];
  if (f.origin_y + blk.top > f.view_bottom || f.origin_y + blk.track_top.back() < f.view_top) return;
  const TimeWindow w = block_window(b);
  if (stacked()) draw_block_header(b, f);
  float top = f.origin_y + blk.lanes_top;
  if (!blk.model.streams_busy.empty()) {
    if (auto v = draw_series_lane(blk.model.streams_busy, "streams busy", top, w, f, true))
      f.lane_value = std::make_pair("streams running kernels", *v);
    top += L::kLaneHeight + L::kTrackGap;
  }
  if (!blk.model.memory.empty())
    if (auto v = draw_series_lane(blk.model.memory, "memory allocated", top, w, f, false))
      f.lane_value = std::make_pair("bytes allocated", *v);
  for (size_t ti = 0; ti < blk.model.tracks.size(); ++ti) draw_track(b, ti, w, f);
}

void Viewer::draw_block_header(size_t b, const Frame& f) {
  const TraceBlock& blk = blocks_[b];
  const float top = f.origin_y + blk.top, bottom = top + L::kBlockHeaderHeight - 2;
  if (bottom < f.view_top || top > f.view_bottom) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(ImVec2(f.origin_x, top), ImVec2(f.axis_x0 + f.axis_width, bottom), IM_COL32(40, 44, 56, 255));
  dl->AddRectFilled(ImVec2(f.origin_x, top), ImVec2(f.origin_x + 6, bottom), kBlockColors[b % 2]);
  const std::string zero = ranks()               ? "the earliest rank's start (one clock)"
                           : alignment_.empty() ? "its start"
                                                : alignment_ + ", " + format_instant(double(blk.zero - blk.start)) +
                                                      " after its start";
  const std::string text =
      blk.name + ": " + blk.source + "   (" + std::to_string(blk.model.tracks.size()) + " tracks; time 0: " + zero + ")";
  dl->AddText(ImVec2(f.origin_x + 12, top + 3), IM_COL32(240, 240, 240, 255), text.c_str());
}

void Viewer::draw_track(size_t b, size_t ti, const TimeWindow& w, Frame& f) {
  TraceBlock& blk = blocks_[b];
  const Track& track = blk.model.tracks[ti];
  const float top = f.origin_y + blk.track_top[ti], bottom = f.origin_y + blk.track_top[ti + 1] - L::kTrackGap;
  if (bottom < f.view_top || top > f.view_bottom) return;  // only what is visible is laid out
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float x0 = f.axis_x0, width = f.axis_width;
  dl->AddRectFilled(ImVec2(f.origin_x, top), ImVec2(x0 + width, bottom),
                    ti % 2 ? IM_COL32(26, 26, 30, 255) : IM_COL32(33, 33, 38, 255));
  dl->AddText(ImVec2(f.origin_x + 4, top + 2), IM_COL32(230, 230, 230, 255), track.label.c_str());
  dl->PushClipRect(ImVec2(x0, top), ImVec2(x0 + width, bottom), true);
  for (size_t ri = 0; ri < track.rows.size(); ++ri) {
    const Row& row = track.rows[ri];
    const float y0 = top + float(ri) * L::kRowHeight + 1, y1 = y0 + L::kRowHeight - 2;
    if (y1 < f.view_top || y0 > f.view_bottom) continue;
    for (const Box& box : layout_row(row, w, width)) {
      const Item& first = row.items[box.first];
      uint32_t color = first.kind == ItemKind::Memcpy   ? kMemcpyColor
                       : first.kind == ItemKind::Memset ? kMemsetColor
                       : first.kind == ItemKind::Api    ? kApiColor
                                                        : name_color(blk.trace.str(first.name));
      if (first.kind == ItemKind::Nvtx && blk.trace.nvtx[first.index].color != 0) {
        const uint32_t argb = blk.trace.nvtx[first.index].color;  // NVTX colors are ARGB
        color = IM_COL32((argb >> 16) & 0xFF, (argb >> 8) & 0xFF, argb & 0xFF, 255);
      }
      if (box.count > 1) color = shade(color, 0.6f);  // a cluster: darker, as Tracy does
      const ImVec2 a(x0 + box.x0, y0), c(x0 + box.x1, y1);
      dl->AddRectFilled(a, c, color);
      if (box.count == 1 && selected_ && selected_->block == b && selected_->track == ti &&
          selected_->item.kind == first.kind && selected_->item.index == first.index)
        dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(c.x + 1, c.y + 1), IM_COL32(255, 255, 255, 255), 0, 0, 2.f);
      if (box.count == 1 && box.x1 - box.x0 > 24) {
        const std::string& label = first.kind == ItemKind::Kernel ? short_name(blk, first.name) : item_name(blk, first);
        dl->PushClipRect(a, c, true);
        dl->AddText(ImVec2(a.x + 3, a.y + 1), IM_COL32(255, 255, 255, 255), label.c_str());
        dl->PopClipRect();
      }
      if (f.hovered && f.mouse_y >= y0 && f.mouse_y < y1 && f.mouse_x >= a.x && f.mouse_x < c.x) {
        if (box.count == 1) {
          hovered_ = Selected{b, ti, first};
        } else {
          Ns total = 0;
          for (uint32_t k = 0; k < box.count; ++k) total += row.items[box.first + k].end - row.items[box.first + k].start;
          f.cluster = std::make_pair(box.count, float(total));
        }
      }
    }
  }
  dl->PopClipRect();
}

std::optional<size_t> Viewer::row_of(size_t block, size_t track, const Item& it) const {
  // By start and identity: item_at would miss zero-length items (marks, empty kernels).
  const auto& rows = blocks_[block].model.tracks[track].rows;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& items = rows[r].items;
    auto i = std::lower_bound(items.begin(), items.end(), it.start, [](const Item& x, Ns t) { return x.start < t; });
    for (; i != items.end() && i->start == it.start; ++i)
      if (i->kind == it.kind && i->index == it.index) return r;
  }
  return std::nullopt;
}

uint32_t Viewer::launch_call(size_t block, const Item& it) {
  TraceBlock& b = blocks_[block];
  uint32_t corr = 0, pid = 0;
  if (it.kind == ItemKind::Kernel) corr = b.trace.kernels[it.index].correlation, pid = b.trace.kernels[it.index].pid;
  else if (it.kind == ItemKind::Memcpy) corr = b.trace.memcpys[it.index].correlation, pid = b.trace.memcpys[it.index].pid;
  else if (it.kind == ItemKind::Memset) corr = b.trace.memsets[it.index].correlation, pid = b.trace.memsets[it.index].pid;
  if (corr == 0) return prof::kNoId;
  if (!b.launches) b.launches = std::make_unique<prof::LaunchIndex>(b.trace);
  return b.launches->find(pid, corr);
}

void Viewer::draw_launch_flow(const Frame& f) {
  // The selected GPU item's launch: a line from the end of its launch call to its start (the
  // launch delay), and for kernels with latency timestamps a bar under the kernel's row from
  // the time it was queued to its start (the queue wait).
  const Item& it = selected_->item;
  const size_t bi = selected_->block;
  const TraceBlock& b = blocks_[bi];
  const auto row = row_of(bi, selected_->track, it);
  if (it.kind == ItemKind::Nvtx || it.kind == ItemKind::Api || !row) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const TimeWindow w = block_window(bi);
  const float y_item = f.origin_y + b.track_top[selected_->track] + float(*row) * L::kRowHeight + 1;
  const float x_start = f.axis_x0 + float(w.x_of_ns(it.start, f.axis_width));
  if (it.kind == ItemKind::Kernel && b.trace.kernels[it.index].queued != prof::kNoTime) {
    const float xq = f.axis_x0 + float(w.x_of_ns(b.trace.kernels[it.index].queued, f.axis_width));
    const float yb = y_item + L::kRowHeight - 4;
    dl->AddRectFilled(ImVec2(xq, yb), ImVec2(std::max(x_start, xq + 1), yb + 3), IM_COL32(255, 220, 120, 255));
  }
  const uint32_t li = launch_call(bi, it);
  if (li == prof::kNoId) return;
  const auto& call = b.trace.api_calls[li];
  for (size_t ti = 0; ti < b.model.tracks.size(); ++ti) {
    const Track& t = b.model.tracks[ti];
    if (t.kind != TrackKind::HostApi || t.id != call.tid || t.pid != call.pid) continue;
    const auto call_row = row_of(bi, ti, Item{call.start, call.end, call.name, li, ItemKind::Api});
    if (!call_row) return;
    const float y_call = f.origin_y + b.track_top[ti] + float(*call_row) * L::kRowHeight + L::kRowHeight / 2;
    const float x_call = f.axis_x0 + float(w.x_of_ns(call.end, f.axis_width));
    const ImVec2 from(x_call, y_call), to(x_start, y_item);
    dl->AddLine(from, to, IM_COL32(255, 255, 255, 200), 1.5f);
    dl->AddCircleFilled(to, 3.f, IM_COL32(255, 255, 255, 220));
    return;
  }
}

std::optional<int64_t> Viewer::draw_series_lane(const StepSeries& s, const char* label, float top, const TimeWindow& w,
                                                const Frame& f, bool levels) {
  const float bottom = top + L::kLaneHeight, x0 = f.axis_x0, width = f.axis_width;
  if (bottom < f.view_top || top > f.view_bottom) return std::nullopt;
  ImDrawList* dl = ImGui::GetWindowDrawList();
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
  const bool mouse_in = f.hovered && f.mouse_y >= top && f.mouse_y < bottom && f.mouse_x >= x0;
  for (int c = 0; c < columns; ++c) {
    const Ns a = w.ns_at(double(c), double(width)), b = std::max(a + 1, w.ns_at(double(c + 1), double(width)));
    const int64_t v = s.max_over(a, b);
    if (mouse_in && int(f.mouse_x - x0) == c) under_mouse = v;
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
    if (selecting_) {
      selecting_ = false;
      if (selection_ && selection_->second > selection_->first) select_range(selection_->first, selection_->second);
    }
    return;
  }
  const auto [begin, end] = extent();
  const double max_span = 1.2 * double(std::max<Ns>(1, end - begin));
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
  window_.keep_near(window_.rel(begin), window_.rel(end));
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
      else if (blocks_[0].range) selection_ = std::make_pair(blocks_[0].range->a, blocks_[0].range->b);  // as before the drag
      else selection_.reset();
    } else if (b > a) {
      selection_ = std::make_pair(a, b);  // shaded while dragging; statistics on release
    }
  }
  // 'f' fits the window; read as a typed character, which does not depend on the backend's key
  // codes (ImGui 1.86 names no key F).
  if (ImGui::IsWindowFocused(ImGuiFocusedFlags_RootAndChildWindows))
    for (ImWchar c : io.InputQueueCharacters)
      if (c == 'f' || c == 'F') fit();
}

void Viewer::item_tooltip(const Selected& s) const {
  const TraceBlock& b = blocks_[s.block];
  const Item& it = s.item;
  ImGui::BeginTooltip();
  ImGui::PushTextWrapPos(700.f);
  ImGui::TextUnformatted(item_name(b, it).c_str());
  ImGui::PopTextWrapPos();
  ImGui::Text("%s%s%s on %s", b.name.c_str(), b.name.empty() ? "" : ": ", to_string(it.kind),
              where(b, it, b.model.tracks[s.track]).c_str());
  ImGui::Text("start %s, duration %s", at(b, it.start).c_str(), format_duration(double(it.end - it.start)).c_str());
  if (it.kind == ItemKind::Kernel) {
    const auto& k = b.trace.kernels[it.index];
    ImGui::Text("grid (%u, %u, %u), block (%u, %u, %u), %u registers", k.grid[0], k.grid[1], k.grid[2], k.block[0],
                k.block[1], k.block[2], k.registers);
  }
  ImGui::EndTooltip();
}

}  // namespace sl::ui
