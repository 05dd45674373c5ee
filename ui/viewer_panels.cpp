// The viewer's text around the timeline: the header lines above it and the panels below it
// (the selected item, the selected range, in A/B mode its role diff, the kernel and stream
// tables of each trace).
#include <imgui.h>

#include <algorithm>
#include <cstdlib>

#include "ui/kernel_names.h"
#include "ui/ruler.h"
#include "ui/viewer.h"

namespace sl::ui {
namespace {

constexpr ImGuiTableFlags kTableFlags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp;

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) {
    if (!s.empty()) s += ", ";
    s += x;
  }
  return s;
}

// "1.4000 ms .. 1.5000 ms": the range's ends from the block's time zero, to a thousandth of it.
std::string range_text(const TraceBlock& b, const RangeStats& r) {
  const double len = double(std::max<Ns>(1, r.b - r.a));
  return format_tick(double(r.a - b.zero), len / 1000, len) + " .. " + format_tick(double(r.b - b.zero), len / 1000, len);
}

void text_cell(const std::string& s) {
  ImGui::TableNextColumn();
  ImGui::TextUnformatted(s.c_str());
}

}  // namespace

std::string Viewer::window_text() const {
  // Relative to the time zero, to a thousandth of the span: distinct however far from zero.
  const double zero = window_.rel(time_zero()), span = window_.span();
  return format_tick(window_.t0 - zero, span / 1000, span) + " .. " + format_tick(window_.t1 - zero, span / 1000, span) +
         " (" + format_duration(span) + ")";
}

void Viewer::draw_header() {
  if (ranks()) {
    std::string names;
    for (const TraceBlock& b : blocks_) names += (names.empty() ? "" : "   ") + b.name + ": " + b.source;
    ImGui::Text("%zu ranks of one job, on their shared clock   %s", blocks_.size(), names.c_str());
  } else if (!ab()) {
    const TraceBlock& b = blocks_[0];
    ImGui::Text("%s   %llu events, %llu on the timeline, %zu tracks, span %s", b.source.c_str(),
                (unsigned long long)b.trace.event_count(), (unsigned long long)b.model.items, b.model.tracks.size(),
                format_duration(double(b.model.end - b.model.begin)).c_str());
  } else {
    ImGui::Text("A: %s   B: %s   aligned at %s", blocks_[0].source.c_str(), blocks_[1].source.c_str(),
                alignment_.empty() ? "the traces' starts" : alignment_.c_str());
  }
  if (ImGui::Button("Fit (F)")) fit();
  ImGui::SameLine();
  const auto [begin, end] = extent();
  const double mid = 0.5 * (window_.t0 + window_.t1), max_span = 1.2 * double(std::max<Ns>(1, end - begin));
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
  ImGui::Text("window %s   wheel: zoom, left drag: pan, right drag: select a range, click: select",
              window_text().c_str());
  for (const TraceBlock& b : blocks_) draw_analysis_line(b);
}

void Viewer::draw_analysis_line(const TraceBlock& b) {
  const std::string who = b.name.empty() ? "" : b.name + ": ";
  const prof::AnalysisResult* a = b.analysis_result();
  if (!a) {
    ImGui::Text("%sanalysis unavailable: %s", who.c_str(), b.analysis_error.c_str());
    return;
  }
  const auto& w = a->whole;
  size_t with_work = 0;  // streams that ran something: those on the timeline
  for (const Track& t : b.model.tracks) with_work += t.streams.size();
  ImGui::Text("%skernels %llu, busy %s, overlap across streams %s (%.1f%% of busy), aux kernels hidden under main %.1f%%, "
              "main stream: %s; streams: %llu in the trace, %zu with GPU work",
              who.c_str(), (unsigned long long)w.kernels, format_duration(double(w.busy)).c_str(),
              format_duration(double(w.stream_overlap)).c_str(), 100.0 * w.stream_overlap_fraction,
              100.0 * w.aux_hidden_fraction, b.trace.stream_label(a->main_stream).c_str(),
              (unsigned long long)a->resources.streams, with_work);
  // A job's ranks: how much of each rank's communication computation hid (HTA's measure).
  if (ranks() && a->comm.comm_kernels > 0)
    ImGui::Text("%scommunication kernels %llu, %s, %.1f%% of it overlapped by computation", who.c_str(),
                (unsigned long long)a->comm.comm_kernels, format_duration(double(a->comm.comm)).c_str(),
                100.0 * a->comm.fraction);
}

bool Viewer::begin_tab(const char* name) {
  const bool open = ImGui::BeginTabItem(name);
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();  // the tab's button
  tabs_[name] = Rect{a.x, a.y, b.x, b.y};
  if (open) open_tab_ = name;
  return open;
}

void Viewer::draw_panels() {
  if (!ImGui::BeginTabBar("panels")) return;
  if (begin_tab("Selection")) {
    ImGui::BeginChild("selection");
    draw_item_details();
    ImGui::Separator();
    if (ab())
      draw_range_diff();
    else if (ranks())
      draw_range_ranks();
    else
      draw_range_stats();
    ImGui::EndChild();
    ImGui::EndTabItem();
  }
  // A/B and ranks: one table per trace, each an equal share of the tab (less its title line);
  // else the whole tab.
  auto height = [&] {
    return stacked() ? std::max(3 * ImGui::GetTextLineHeightWithSpacing(),
                                ImGui::GetContentRegionAvail().y / float(blocks_.size()) -
                                    ImGui::GetTextLineHeightWithSpacing() - 4)
                     : 0.f;
  };
  if (begin_tab("Kernels")) {
    const float h = height();
    for (const TraceBlock& b : blocks_) draw_kernel_table(b, h);
    ImGui::EndTabItem();
  }
  if (begin_tab("Streams")) {
    const float h = height();
    for (const TraceBlock& b : blocks_) draw_stream_table(b, h);
    ImGui::EndTabItem();
  }
  ImGui::EndTabBar();
}

void Viewer::draw_item_details() {
  if (!selected_) {
    ImGui::TextDisabled("click an item on the timeline to see it here");
    return;
  }
  TraceBlock& b = blocks_[selected_->block];
  const Item& it = selected_->item;
  ImGui::TextWrapped("%s%s%s", b.name.c_str(), b.name.empty() ? "" : ": ", item_name(b, it).c_str());
  ImGui::Text("%s on %s: start %s, end %s, duration %s", to_string(it.kind),
              where(b, it, b.model.tracks[selected_->track]).c_str(), at(b, it.start).c_str(), at(b, it.end).c_str(),
              format_duration(double(it.end - it.start)).c_str());
  if (it.kind == ItemKind::Kernel) {
    const auto& k = b.trace.kernels[it.index];
    ImGui::Text("grid (%u, %u, %u), block (%u, %u, %u), %u registers, shared memory %u B static + %u B dynamic, "
                "correlation %u%s",
                k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2], k.registers, k.static_smem,
                k.dynamic_smem, k.correlation, k.graph_id ? ", graph node" : "");
    if (k.queued != prof::kNoTime && k.submitted != prof::kNoTime)
      ImGui::Text("queued %s before start, submitted %s before start", format_duration(double(k.start - k.queued)).c_str(),
                  format_duration(double(k.start - k.submitted)).c_str());
  } else if (it.kind == ItemKind::Memcpy) {
    const auto& c = b.trace.memcpys[it.index];
    const double ns = double(std::max<Ns>(1, c.end - c.start));
    ImGui::Text("%llu bytes, %.1f GB/s", (unsigned long long)c.bytes, double(c.bytes) / ns);
  } else if (it.kind == ItemKind::Api) {
    ImGui::Text("correlation %u, return value %d", b.trace.api_calls[it.index].correlation,
                b.trace.api_calls[it.index].return_value);
  }
  const uint32_t li = launch_call(selected_->block, it);  // the launch call, found by correlation id
  if (li != prof::kNoId) {
    const auto& a = b.trace.api_calls[li];
    ImGui::Text("launched by %s at %s on thread %u; launch end to start: %s",
                std::string(prof::strip_api_version(b.trace.str(a.name))).c_str(), at(b, a.start).c_str(), a.tid,
                format_duration(double(it.start - a.end)).c_str());
  }
}

void Viewer::draw_range_stats() {
  const TraceBlock& blk = blocks_[0];
  if (!blk.range || selecting_) {
    ImGui::TextDisabled("right-drag on the timeline to select a time range");
    return;
  }
  const RangeStats& r = *blk.range;
  const double len = double(std::max<Ns>(1, r.b - r.a));
  ImGui::Text("range %s (%s): kernels busy %s (%.1f%%), overlap across streams %s (%.1f%% of busy)",
              range_text(blk, r).c_str(), format_duration(len).c_str(),
              format_duration(double(r.gpu_busy)).c_str(), 100.0 * double(r.gpu_busy) / len,
              format_duration(double(r.stream_overlap)).c_str(),
              r.gpu_busy ? 100.0 * double(r.stream_overlap) / double(r.gpu_busy) : 0.0);
  if (ImGui::BeginTable("range_tracks", 3, kTableFlags)) {
    ImGui::TableSetupColumn("track");
    ImGui::TableSetupColumn("items");
    ImGui::TableSetupColumn("busy");
    ImGui::TableHeadersRow();
    for (const TrackTime& t : r.tracks) {
      ImGui::TableNextRow();
      text_cell(blk.model.tracks[t.track].label);
      ImGui::TableNextColumn();
      ImGui::Text("%llu", (unsigned long long)t.items);
      ImGui::TableNextColumn();
      ImGui::Text("%s (%.1f%%)", format_duration(double(t.busy)).c_str(), 100.0 * double(t.busy) / len);
    }
    ImGui::EndTable();
  }
  if (ImGui::BeginTable("range_kernels", 3, kTableFlags)) {
    ImGui::TableSetupColumn("kernel", ImGuiTableColumnFlags_WidthStretch, 4.f);
    ImGui::TableSetupColumn("count");
    ImGui::TableSetupColumn("time in range");
    ImGui::TableHeadersRow();
    for (size_t i = 0; i < std::min<size_t>(r.kernels.size(), 50); ++i) {
      ImGui::TableNextRow();
      text_cell(short_kernel_name(r.kernels[i].name));
      ImGui::TableNextColumn();
      ImGui::Text("%llu", (unsigned long long)r.kernels[i].count);
      text_cell(format_duration(double(r.kernels[i].time)));
    }
    ImGui::EndTable();
  }
}

// Ranks mode: the selected range on every rank, side by side (the same instants on each GPU).
void Viewer::draw_range_ranks() {
  if (!blocks_[0].range || selecting_) {
    ImGui::TextDisabled("right-drag on the timeline to select a time range: every rank's GPU over the same instants");
    return;
  }
  const RangeStats& r0 = *blocks_[0].range;
  const double len = double(std::max<Ns>(1, r0.b - r0.a));
  ImGui::Text("range %s (%s)", range_text(blocks_[0], r0).c_str(), format_duration(len).c_str());
  if (!ImGui::BeginTable("range_ranks", 5, kTableFlags)) return;
  for (const char* h : {"rank", "kernels busy", "busy %", "overlap across streams", "top kernel in the range"})
    ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  for (const TraceBlock& b : blocks_) {
    const RangeStats& r = *b.range;
    ImGui::TableNextRow();
    text_cell(b.name);
    text_cell(format_duration(double(r.gpu_busy)));
    ImGui::TableNextColumn();
    ImGui::Text("%.1f%%", 100.0 * double(r.gpu_busy) / len);
    text_cell(format_duration(double(r.stream_overlap)));
    text_cell(r.kernels.empty() ? std::string("-")
                                : short_kernel_name(r.kernels[0].name) + " (" +
                                      format_duration(double(r.kernels[0].time)) + ")");
  }
  ImGui::EndTable();
}

void Viewer::draw_range_diff() {
  if (!blocks_[0].range || selecting_) {
    ImGui::TextDisabled("right-drag on the timeline to select a time range: both traces' ops in it, matched by role");
    return;
  }
  const RangeStats& ra = *blocks_[0].range;
  const double len = double(std::max<Ns>(1, ra.b - ra.a));
  ImGui::Text("range %s (%s) from %s", range_text(blocks_[0], ra).c_str(), format_duration(len).c_str(),
              alignment_.empty() ? "the traces' starts" : alignment_.c_str());
  for (const TraceBlock& b : blocks_) {
    const RangeStats& r = *b.range;
    ImGui::Text("%s: kernels busy %s (%.1f%%), overlap across streams %s", b.name.c_str(),
                format_duration(double(r.gpu_busy)).c_str(), 100.0 * double(r.gpu_busy) / len,
                format_duration(double(r.stream_overlap)).c_str());
    if (!b.profile) ImGui::TextDisabled("%s: no role table: %s", b.name.c_str(), b.analysis_error.c_str());
  }
  if (!diff_) return;
  ImGui::Text("%zu roles with ops starting in the range (%llu only in A, %llu only in B), by |delta| = |total B - total A|",
              diff_->rows.size(), (unsigned long long)diff_->roles_only_a, (unsigned long long)diff_->roles_only_b);
  draw_range_role_table(*diff_);
}

void Viewer::draw_range_role_table(const RangeDiff& d) {
  const ImGuiTableFlags flags = kTableFlags | ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable;
  if (!ImGui::BeginTable("range_roles", 10, flags)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("role", ImGuiTableColumnFlags_WidthStretch, 6.f);
  for (const char* h : {"count A", "count B", "median A", "median B", "total A", "total B", "delta"})
    ImGui::TableSetupColumn(h, ImGuiTableColumnFlags_WidthStretch, 1.f);
  ImGui::TableSetupColumn("streams A", ImGuiTableColumnFlags_WidthStretch, 2.f);
  ImGui::TableSetupColumn("streams B", ImGuiTableColumnFlags_WidthStretch, 2.f);
  ImGui::TableHeadersRow();
  ImGuiListClipper clipper;  // only the visible rows are laid out
  clipper.Begin(int(d.rows.size()));
  while (clipper.Step())
    for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
      const RangeRoleRow& r = d.rows[size_t(i)];
      ImGui::TableNextRow();
      text_cell(role_label(r));
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", r.key.c_str());
      for (uint64_t c : {r.count_a, r.count_b}) text_cell(std::to_string(c));
      for (double v : {r.median_a, r.median_b, double(r.total_a), double(r.total_b)}) text_cell(format_duration(v));
      text_cell(std::string(r.delta() > 0 ? "+" : "").append(format_duration(double(r.delta()))));
      text_cell(joined(r.streams_a));
      text_cell(joined(r.streams_b));
    }
  ImGui::EndTable();
}

bool Viewer::begin_analysis_table(const TraceBlock& b, const char* id, std::initializer_list<const char*> headers,
                                  float height) {
  if (!b.name.empty()) ImGui::Text("%s: %s", b.name.c_str(), b.source.c_str());
  const prof::AnalysisResult* a = b.analysis_result();
  if (!a) {
    ImGui::TextDisabled("%s", b.analysis_error.c_str());
    return false;
  }
  const ImGuiTableFlags flags = kTableFlags | ImGuiTableFlags_ScrollY;
  // One id per block ("kernels", "kernelsB"): ImGui wants the ID stack as it was at BeginTable
  // when EndTable comes, so no PushID around it.
  const std::string table_id = id + (&b == &blocks_[0] ? std::string() : b.name);
  if (!ImGui::BeginTable(table_id.c_str(), int(headers.size()), flags, ImVec2(0, height))) return false;
  ImGui::TableSetupScrollFreeze(0, 1);  // the header row stays while the rows scroll
  for (const char* h : headers) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  return true;
}

void Viewer::draw_kernel_table(const TraceBlock& b, float height) {
  if (!begin_analysis_table(b, "kernels", {"kernel", "count", "total", "mean", "median", "max"}, height)) return;
  for (const auto& k : b.analysis_result()->kernel_stats) {  // by total time, descending
    ImGui::TableNextRow();
    text_cell(short_kernel_name(k.name));
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", k.name.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%llu", (unsigned long long)k.count);
    for (double v : {double(k.total), k.mean, k.median, double(k.max)}) text_cell(format_duration(v));
  }
  ImGui::EndTable();
}

void Viewer::draw_stream_table(const TraceBlock& b, float height) {
  if (!begin_analysis_table(b, "streams", {"stream", "priority", "kernels", "busy", "overlapped", "host wait",
                                           "kernel wait", "queue wait p50"}, height))
    return;
  for (const auto& s : b.analysis_result()->streams) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("%s%s", s.label.c_str(), s.is_main ? " (main)" : "");
    ImGui::TableNextColumn();
    ImGui::Text("%d", s.priority);
    ImGui::TableNextColumn();
    ImGui::Text("%llu", (unsigned long long)s.kernels);
    text_cell(format_duration(double(s.busy)));
    ImGui::TableNextColumn();
    ImGui::Text("%.1f%%", 100.0 * s.overlap_fraction);
    for (double v : {double(s.idle_host_wait), double(s.idle_kernel_wait), s.queue_wait.median}) text_cell(format_duration(v));
  }
  ImGui::EndTable();
}

}  // namespace sl::ui
