// Small parallel building blocks for the trace loaders and Trace::finalize: a parallel for, page
// pre-faulting, and a stable sort whose result is exactly std::stable_sort's (a stable sort's
// output is unique: equal elements keep their input order), only computed on several threads.
// Internal to the profiler library.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace sl::prof::parallel {

// Runs f(i) for every i in [0, n) on up to `threads` threads (the caller is one of them); items
// are handed out one at a time, so uneven items balance. The first exception thrown by any f is
// rethrown here once every thread has stopped.
template <class F>
void parallel_for(unsigned threads, size_t n, F&& f) {
  const size_t t = std::min<size_t>(std::max(threads, 1u), n);
  if (t <= 1) {
    for (size_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;
  auto run = [&] {
    try {
      for (size_t i; (i = next.fetch_add(1)) < n;) f(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next = n;
    }
  };
  std::vector<std::thread> helpers;
  helpers.reserve(t - 1);
  for (size_t k = 1; k < t; ++k) {
    try {
      helpers.emplace_back(run);
    } catch (const std::system_error&) {
      break;  // no more threads: fewer do the work
    }
  }
  run();
  for (auto& h : helpers) h.join();
  if (error) std::rethrow_exception(error);
}

// Maps the pages of [p, p + bytes) in one system call, before anything is written there. A first
// write to a fresh page faults, and on virtual machines a fault costs more than filling the page;
// doing it here, on several threads for separate ranges, takes it out of the serial writes that
// follow (std::vector::resize). Only the whole pages inside the range; a no-op where the kernel
// lacks MADV_POPULATE_WRITE (Linux < 5.14) or the memory is already mapped.
inline void prefault(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (uintptr_t(p) + page - 1) & ~(page - 1);
  const uintptr_t e = (uintptr_t(p) + bytes) & ~(page - 1);
  if (e > b) (void)madvise(reinterpret_cast<void*>(b), e - b, MADV_POPULATE_WRITE);
#else
  (void)p, (void)bytes;
#endif
}

// Below this many elements the threads cost more than they save.
inline constexpr size_t kMinParallelElements = size_t(1) << 15;

// std::is_sorted over pieces checked on several threads.
template <class T, class Less>
bool is_sorted(const T* p, size_t n, Less less, unsigned threads) {
  if (threads <= 1 || n < kMinParallelElements) return std::is_sorted(p, p + n, less);
  std::atomic<bool> sorted{true};
  parallel_for(threads, threads, [&](size_t k) {
    const size_t b = n * k / threads, e = std::min(n, n * (k + 1) / threads + 1);  // overlap one: the seam
    if (sorted.load(std::memory_order_relaxed) && !std::is_sorted(p + b, p + e, less)) sorted = false;
  });
  return sorted;
}

namespace detail {

// How many of the first k elements of the stable merge of a[0, m) and b[0, n) come from a (on
// ties a's elements come first). Binary search on the merge path.
template <class T, class Less>
size_t co_rank(size_t k, const T* a, size_t m, const T* b, size_t n, Less less) {
  size_t lo = k > n ? k - n : 0, hi = std::min(k, m);
  while (lo < hi) {
    const size_t i = lo + (hi - lo) / 2;
    if (!less(b[k - i - 1], a[i])) lo = i + 1;  // a[i] goes before b[k - i - 1]: more of a
    else hi = i;
  }
  return lo;
}

// One piece of a merge pass: outputs [k0, k1) of the stable merge of runs a and b.
template <class T>
struct MergePiece {
  const T *a, *b;
  size_t m, n;
  T* out;
  size_t k0, k1;
};

template <class T, class Less>
void merge_piece(const MergePiece<T>& p, Less less) {
  const size_t i0 = co_rank(p.k0, p.a, p.m, p.b, p.n, less), i1 = co_rank(p.k1, p.a, p.m, p.b, p.n, less);
  std::merge(p.a + i0, p.a + i1, p.b + (p.k0 - i0), p.b + (p.k1 - i1), p.out + p.k0, less);
}

// Merges adjacent pairs of the sorted runs of `from` (bounds: run i is [bounds[i], bounds[i+1]))
// into `to`, each pair cut into pieces so that every thread has work; bounds become the merged runs'.
template <class T, class Less>
void merge_pass(const T* from, T* to, std::vector<size_t>& bounds, Less less, unsigned threads) {
  const size_t total = bounds.back() - bounds.front();
  const size_t piece = std::max<size_t>(total / (size_t(threads) * 4) + 1, 4096);
  std::vector<MergePiece<T>> pieces;
  std::vector<size_t> merged{bounds.front()};
  for (size_t r = 0; r + 1 < bounds.size(); r += 2) {
    const size_t b = bounds[r], mid = bounds[r + 1];
    const size_t e = r + 2 < bounds.size() ? bounds[r + 2] : mid;  // an odd last run: merged with nothing
    const size_t len = e - b;
    for (size_t k = 0; k < len; k += piece)
      pieces.push_back({from + b, from + mid, mid - b, e - mid, to + b, k, std::min(len, k + piece)});
    merged.push_back(e);
  }
  parallel_for(threads, pieces.size(), [&](size_t i) { merge_piece(pieces[i], less); });
  bounds = std::move(merged);
}

// Uninitialised storage for n trivially copyable T (no value-initialisation pass over it).
template <class T>
struct Buffer {
  explicit Buffer(size_t count) : n(count), p(std::allocator<T>().allocate(count)) {}
  ~Buffer() { std::allocator<T>().deallocate(p, n); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  size_t n;
  T* p;
};

// Copies n elements on several threads.
template <class T>
void copy(const T* from, T* to, size_t n, unsigned threads) {
  const size_t pieces = std::max<size_t>(threads, 1);
  parallel_for(threads, pieces, [&](size_t k) {
    const size_t b = n * k / pieces, e = n * (k + 1) / pieces;
    std::copy(from + b, from + e, to + b);
  });
}

// Permutation cycles: which positions are moved, and which cross from one thread's share of the
// positions into another's.
enum CycleState : uint8_t { kTodo, kDone, kCrosses };

// Moves the cycle through s: v[j] = (old) v[src(j)] along it.
template <class T, class Src>
void move_cycle(T* v, uint8_t* state, Src& src, size_t s) {
  const T first = v[s];
  for (size_t j = s;;) {
    const size_t from = src(j);
    state[j] = kDone;
    if (from == s) {
      v[j] = first;
      return;
    }
    v[j] = v[from];
    j = from;
  }
}

// Moves the cycle through s if it stays within [b, e); else marks the part of it walked there
// as crossing (moved later by one thread). Each position of [b, e) is walked at most twice.
template <class T, class Src>
void move_cycle_within(T* v, uint8_t* state, Src& src, size_t s, size_t b, size_t e) {
  size_t j = s;
  do {
    j = src(j);
    if (j < b || j >= e || state[j] == kCrosses) {
      for (size_t k = s; k >= b && k < e && state[k] != kCrosses; k = src(k)) state[k] = kCrosses;
      return;
    }
  } while (j != s);
  move_cycle(v, state, src, s);
}

// v[j] = (old) v[src(j)] for every j, in place: no second copy of the records (filling fresh
// memory is slow: page faults). Cycles within one thread's share of the positions are moved by
// that thread; those that cross shares (few when the input was nearly sorted) then by one.
template <class T, class Src>
void permute(T* v, size_t n, Src src, unsigned threads) {
  Buffer<uint8_t> state(n);
  const size_t shares = std::max<size_t>(threads, 1);
  parallel_for(threads, shares, [&](size_t k) {
    const size_t b = n * k / shares, e = n * (k + 1) / shares;
    std::fill(state.p + b, state.p + e, uint8_t(kTodo));
    for (size_t s = b; s < e; ++s)
      if (state.p[s] == kTodo) move_cycle_within(v, state.p, src, s, b, e);
  });
  for (size_t s = 0; s < n; ++s)
    if (state.p[s] == kCrosses) move_cycle(v, state.p, src, s);
}

}  // namespace detail

// std::stable_sort(p, p + n, less), the same order, on several threads: blocks sorted in place
// at once, then merged pairwise in passes (each merge cut along its merge path, so that all
// threads work).
template <class T, class Less>
void stable_sort(T* p, size_t n, Less less, unsigned threads) {
  static_assert(std::is_trivially_copyable_v<T>, "merged through raw buffers");
  if (threads <= 1 || n < kMinParallelElements) {
    std::stable_sort(p, p + n, less);
    return;
  }
  std::vector<size_t> bounds(threads + 1);
  for (size_t k = 0; k <= threads; ++k) bounds[k] = n * k / threads;
  parallel_for(threads, threads, [&](size_t k) {
    T* b = p + bounds[k];
    T* e = p + bounds[k + 1];
    if (!std::is_sorted(b, e, less)) std::stable_sort(b, e, less);
  });
  detail::Buffer<T> buf(n);
  T *from = p, *to = buf.p;
  while (bounds.size() > 2) {
    detail::merge_pass(from, to, bounds, less, threads);
    std::swap(from, to);
  }
  if (from != p) detail::copy(from, p, n, threads);
}

// std::stable_sort(v) by key_of(element) ascending (the same order), for records larger than
// their keys: (key, index) pairs are sorted (the index breaks ties: equal keys keep their input
// order), then the records permuted in place, so that each record moves once instead of once
// per merge pass.
template <class T, class KeyOf>
void stable_sort_by_key(std::vector<T>& v, KeyOf key_of, unsigned threads) {
  const size_t n = v.size();
  if (n < 2) return;
  if (n > UINT32_MAX) {
    std::stable_sort(v.begin(), v.end(), [&](const T& a, const T& b) { return key_of(a) < key_of(b); });
    return;
  }
  using K = decltype(key_of(v[0]));
  struct Entry {
    K key;
    uint32_t i;
    bool operator<(const Entry& o) const { return key < o.key || (!(o.key < key) && i < o.i); }
  };
  const size_t pieces = std::max<size_t>(threads, 1);
  auto each_piece = [&](auto&& f) {
    parallel_for(threads, pieces, [&](size_t k) { f(n * k / pieces, n * (k + 1) / pieces); });
  };
  detail::Buffer<Entry> keys(n);
  each_piece([&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) keys.p[i] = Entry{key_of(v[i]), uint32_t(i)};
  });
  stable_sort(keys.p, n, std::less<Entry>(), threads);
  detail::permute(v.data(), n, [&](size_t j) { return size_t(keys.p[j].i); }, threads);
}

}  // namespace sl::prof::parallel
