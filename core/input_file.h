// Checks on a path before it is opened for reading. A FIFO without a writer blocks open() and
// read() forever, a directory opens and reads as an error deep inside a parser: readers of
// files (configs, checkpoints, token files) refuse anything but a regular file up front, and
// readers that can take a stream (traces: `analyze /dev/stdin`) read it whole, waiting a bounded
// time for a writer.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

namespace sl {

// Throws "<what> '<path>': <kind>, not a regular file" for a directory, FIFO, device or socket,
// and "<what> '<path>': <strerror>" when it cannot be stat'ed.
void require_regular_file(const std::string& path, const std::string& what);

// True for a FIFO / pipe, character device or socket (e.g. /dev/stdin fed by a pipe).
bool is_stream(const std::string& path);

// Reads a stream to its end, handing each piece read to `out`. A FIFO whose writer has not
// connected (or written) within `wait_s` seconds is an error, as is more than `max_bytes` of data.
void read_stream(const std::string& path, const std::string& what, double wait_s, size_t max_bytes,
                 const std::function<void(const char*, size_t)>& out);
// The same, into one string.
std::string read_stream(const std::string& path, const std::string& what, double wait_s, size_t max_bytes);

}  // namespace sl
