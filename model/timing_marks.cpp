// The default timing marks of Backend (model/backend.h): host backends run every op before
// the call returns, so the host clock at record time is when the stream reached the mark.
#include <chrono>

#include "core/error.h"
#include "model/backend.h"

namespace sl {

Event Backend::create_timing_mark(const std::string&) {
  host_marks_ms_.push_back(0);
  return Event{int(host_marks_ms_.size()) - 1};
}

void Backend::record_timing_mark(Event e, Stream) {
  SL_CHECK(e.id >= 0 && size_t(e.id) < host_marks_ms_.size(), name(), " backend: timing mark ", e.id,
           " does not exist");
  host_marks_ms_[size_t(e.id)] =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Backend::elapsed_ms(Event from, Event to) {
  for (Event e : {from, to})
    SL_CHECK(e.id >= 0 && size_t(e.id) < host_marks_ms_.size(), name(), " backend: timing mark ", e.id,
             " does not exist");
  return host_marks_ms_[size_t(to.id)] - host_marks_ms_[size_t(from.id)];
}

}  // namespace sl
