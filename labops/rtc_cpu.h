// CUDA's execution model on the CPU, for labops.rtc (see "The CPU path" in labops/rtc.py).
//
// labops.rtc pastes this file, after the report struct, into every kernel it compiles for the CPU. A
// block's threads run as fibers on one core: each runs until it waits (at __syncthreads, __syncwarp or a
// warp shuffle), then the next runs. So threads of a block really wait for each other and really share
// __shared__ arrays. Every access to a __shared__ array or an output tensor goes through a small proxy that
// checks its index and keeps, per element, which thread last wrote it and which last read it, and in which
// "epoch" (barriers passed): two threads touching one element with no barrier between, one of them writing,
// is a data race, found at the access that makes it one, whatever order the threads ran in.
//
// A bug found here is written to the report (shared with Python) and ends the launch at once.
#include <math.h>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <type_traits>
#if LABOPS_RTC_FIBERS
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#endif

namespace labops_rtc {
struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };
}  // namespace labops_rtc
using labops_rtc::uint3;
using labops_rtc::dim3;
using std::abs;

namespace labops_rtc {

enum bug_kind : long long { no_bug = 0, out_of_bounds = 1, data_race = 2, divergent_barrier = 3,
                            uninitialized_read = 4, too_much_shared = 5 };
enum race_kind : long long { read_before_write_ordered = 1, write_after_read = 2, two_writes = 3 };

static report* shared_report;  // set by labops_rtc_launch

// ---------------------------------------------------------------------------------------------------------
// Who is running: the block, the thread, and the epochs that order their accesses
// ---------------------------------------------------------------------------------------------------------
constexpr int max_warps = 32;  // 1024 threads

struct block_state {
  long long block;              // linear index of the running block
  unsigned threads;             // threads per block
  unsigned long long generation;  // bumped for every block: __shared__ arrays reset when they see a new one
  unsigned epoch;               // __syncthreads passed by this block
  unsigned warp_epoch[max_warps];  // warp syncs (shuffles, __syncwarp) passed, per warp
};
static block_state now;
static unsigned me;  // the running thread's linear index in its block

inline long long global_id(unsigned thread) { return now.block * now.threads + thread; }

[[noreturn]] inline void stop_launch() { std::_Exit(0); }

inline void set_name(const char* name) {
  std::strncpy(shared_report->bug_array, name, sizeof shared_report->bug_array - 1);
}

// The first read of a __shared__ element that no thread of the block had written is only noted: if
// another thread writes it later in the same epoch, the read came before that write and it is a race
// (found at the write); if nobody does before the next barrier, it is reported there.
struct pending_read { const char* name; long long index; long long thread; };
static pending_read uninitialized = {nullptr, 0, 0};

[[noreturn]] inline void report_uninitialized() {
  report& r = *shared_report;
  r.bug_kind = uninitialized_read;
  set_name(uninitialized.name);
  r.bug_index = uninitialized.index;
  r.bug_thread_a = uninitialized.thread;
  stop_launch();
}

[[noreturn]] inline void report_out_of_bounds(const char* name, long long index, long long numel, bool write,
                                              const long long* indices = nullptr, int depth = 0) {
  if (uninitialized.name) report_uninitialized();  // an index read from poisoned memory: that is the cause
  report& r = *shared_report;
  r.bug_kind = out_of_bounds;
  set_name(name);
  r.bug_index = index;
  r.bug_extent = numel;
  r.bug_write = write ? 1 : 0;
  r.bug_thread_a = global_id(me);
  for (int d = 0; d < depth && d < 4; ++d) r.bug_indices[d] = indices[d];
  r.bug_depth = depth;
  stop_launch();
}

// ---------------------------------------------------------------------------------------------------------
// Shadow memory: who touched an element last, and when
// ---------------------------------------------------------------------------------------------------------
struct shadow {
  long long writer;  // global thread index + 1 of the last write; 0: none in this launch (or block, if shared)
  long long reader;  // the same for the last read; many_readers: two or more threads, unordered
  unsigned write_epoch, write_warp_epoch, read_epoch, read_warp_epoch;
  long long read_block;  // for many_readers: which block read
  int atomic;        // the last write was an atomic
  int pad;
};
constexpr long long many_readers = -1;

struct array_info {
  const char* name;
  long long numel;
  shadow* marks;
  bool is_shared;
  int tensor = -1;  // the tensor's position among the kernel's tensors; -1 for a __shared__ array
};

// ---------------------------------------------------------------------------------------------------------
// The access log of a recorded launch (record=True): every read and write of a tensor, in the order made
// ---------------------------------------------------------------------------------------------------------
// log[0] counts the accesses; from log[1] on, four numbers each: tensor, element, global thread, 1 if a write.
// A recorded launch checks indices but not races on tensors: the log shows every access instead.
static long long* access_log = nullptr;
static long long access_log_capacity = 0;

inline bool recorded(const array_info& a) { return access_log != nullptr && a.tensor >= 0; }

inline void log_access(const array_info& a, long long index, bool write) {
  const long long n = access_log[0]++;
  if (n >= access_log_capacity) return;  // Python sees a count past the capacity and says so
  long long* entry = access_log + 1 + 4 * n;
  entry[0] = a.tensor;
  entry[1] = index;
  entry[2] = global_id(me);
  entry[3] = write ? 1 : 0;
}

// Whether an access made by `thread` (global index) at (epoch, warp_epoch) is ordered before what the
// running thread does now: same thread, or a barrier of this block, or a sync of this warp, since.
inline bool ordered(long long thread, unsigned epoch, unsigned warp_epoch) {
  const long long self = global_id(me);
  if (thread == self) return true;
  if (thread / now.threads != now.block) return false;  // another block: blocks are never ordered
  if (now.epoch != epoch) return true;
  const unsigned warp = static_cast<unsigned>(thread % now.threads) / 32;
  return warp == me / 32 && now.warp_epoch[warp] != warp_epoch;
}

[[noreturn]] inline void report_race(const array_info& a, long long index, race_kind kind, long long other) {
  report& r = *shared_report;
  r.bug_kind = data_race;
  set_name(a.name);
  r.bug_index = index;
  r.bug_race = kind;
  r.bug_thread_a = other;
  r.bug_thread_b = global_id(me);
  r.bug_write = a.is_shared ? 1 : 0;  // reused: 1 for a __shared__ array
  stop_launch();
}

inline void on_read(const array_info& a, long long index, bool atomic = false) {
  shadow& s = a.marks[index];
  const long long self = global_id(me);
  if (s.writer && !ordered(s.writer - 1, s.write_epoch, s.write_warp_epoch) && !(atomic && s.atomic))
    report_race(a, index, read_before_write_ordered, s.writer - 1);
  if (!s.writer && a.is_shared && !uninitialized.name) uninitialized = {a.name, index, self};
  if (atomic) return;  // an atomic's read is part of its write
  const unsigned warp = me / 32;
  if (s.reader == 0 || s.reader == self + 1 ||
      (s.reader > 0 && ordered(s.reader - 1, s.read_epoch, s.read_warp_epoch)) ||
      (s.reader == many_readers && (s.read_block != now.block || s.read_epoch != now.epoch) &&
       s.read_block == now.block)) {
    s.reader = self + 1;
  } else {
    s.reader = many_readers;
    s.read_block = now.block;
  }
  s.read_epoch = now.epoch;
  s.read_warp_epoch = now.warp_epoch[warp];
}

inline void on_write(const array_info& a, long long index, bool atomic = false) {
  shadow& s = a.marks[index];
  const long long self = global_id(me);
  if (s.writer && !ordered(s.writer - 1, s.write_epoch, s.write_warp_epoch) && !(atomic && s.atomic))
    report_race(a, index, two_writes, s.writer - 1);
  if (s.reader > 0 && !ordered(s.reader - 1, s.read_epoch, s.read_warp_epoch))
    report_race(a, index, write_after_read, s.reader - 1);
  if (s.reader == many_readers && (s.read_block != now.block || s.read_epoch == now.epoch))
    report_race(a, index, write_after_read, -1);
  s.writer = self + 1;
  s.write_epoch = now.epoch;
  s.write_warp_epoch = now.warp_epoch[me / 32];
  s.atomic = atomic ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------------------
// ref<T>: one element of an output tensor or a __shared__ array; reading and writing it are checked
// ---------------------------------------------------------------------------------------------------------
template <class T> struct tracked_ptr;

template <class T> struct ref {
  const array_info* a;
  T* data;
  long long index;

  T get() const {
    check(false);
    if (recorded(*a)) log_access(*a, index, false); else on_read(*a, index);
    return data[index];
  }
  void set(T v) const {
    check(true);
    if (recorded(*a)) log_access(*a, index, true); else on_write(*a, index);
    data[index] = v;
  }
  void check(bool write) const {
    if (static_cast<unsigned long long>(index) >= static_cast<unsigned long long>(a->numel))
      report_out_of_bounds(a->name, index, a->numel, write);
  }
  operator T() const { return get(); }
  const ref& operator=(T v) const { set(v); return *this; }
  const ref& operator=(const ref& other) const { set(other.get()); return *this; }
  template <class U> const ref& operator+=(U v) const { T old = get(); set(static_cast<T>(old + v)); return *this; }
  template <class U> const ref& operator-=(U v) const { T old = get(); set(static_cast<T>(old - v)); return *this; }
  template <class U> const ref& operator*=(U v) const { T old = get(); set(static_cast<T>(old * v)); return *this; }
  template <class U> const ref& operator/=(U v) const { T old = get(); set(static_cast<T>(old / v)); return *this; }
  T operator++() const { T v = static_cast<T>(get() + 1); set(v); return v; }
  T operator--() const { T v = static_cast<T>(get() - 1); set(v); return v; }
  T operator++(int) const { T v = get(); set(static_cast<T>(v + 1)); return v; }
  T operator--(int) const { T v = get(); set(static_cast<T>(v - 1)); return v; }
  tracked_ptr<T> operator&() const { return {a, data, index}; }
};

// A pointer into a tracked array (`&y[i]`, `s + i`): indexes are checked against the whole array.
template <class T> struct tracked_ptr {
  const array_info* a;
  T* data;
  long long offset;

  template <class I> ref<T> operator[](I i) const { return at(offset + static_cast<long long>(i)); }
  ref<T> operator*() const { return at(offset); }
  ref<T> at(long long index) const { return {a, data, index}; }  // checked when it is read or written
  template <class I> tracked_ptr operator+(I i) const { return {a, data, offset + static_cast<long long>(i)}; }
  template <class I> tracked_ptr operator-(I i) const { return {a, data, offset - static_cast<long long>(i)}; }
  operator T*() const { return data + offset; }  // a plain pointer: unchecked from here on
  // `(int*)&f[0]`, the atomicCAS idiom for floats: a plain pointer too
  template <class U, typename std::enable_if<!std::is_same<U, T>::value, int>::type = 0>
  explicit operator U*() const { return reinterpret_cast<U*>(data + offset); }
};

// ---------------------------------------------------------------------------------------------------------
// Tensors: the name x in a body
// ---------------------------------------------------------------------------------------------------------
template <class I>
using if_index = typename std::enable_if<std::is_integral<I>::value || std::is_enum<I>::value, int>::type;

// An input (const T) is read only: x[i] is a checked plain reference. An output's x[i] is a ref<T>, so that
// its reads and writes are tracked too (a race between blocks, or an output read before it was written).
// `x + i` is checked the same way; a plain pointer made from it (`const float* row = x + i`) is not, and
// only the guard page after each tensor's copy catches it.
template <class T> struct checked_ptr {
  using element_ref = typename std::conditional<std::is_const<T>::value, T&, ref<T>>::type;
  T* data;            // the tensor's first element
  long long offset;   // where this pointer points, in elements from data (x + 5 has offset 5)
  const array_info* info;  // its name and size (and, for an output, its marks)

  checked_ptr(void* first, const array_info* i) : data(static_cast<T*>(first)), offset(0), info(i) {}

  element_ref element(long long index) const {
    if constexpr (std::is_const<T>::value) {
      if (static_cast<unsigned long long>(index) >= static_cast<unsigned long long>(info->numel))
        report_out_of_bounds(info->name, index, info->numel, false);
      if (recorded(*info)) log_access(*info, index, false);
      return data[index];
    } else {
      return ref<T>{info, data, index};  // checked when it is read or written
    }
  }
  template <class I, if_index<I> = 0> element_ref operator[](I i) const { return element(offset + static_cast<long long>(i)); }
  element_ref operator*() const { return element(offset); }
  operator T*() const { return data + offset; }  // where a plain pointer is needed: unchecked from here on

  template <class I, if_index<I> = 0> checked_ptr operator+(I i) const {
    checked_ptr moved = *this;
    moved.offset += static_cast<long long>(i);
    return moved;
  }
  template <class I, if_index<I> = 0> friend checked_ptr operator+(I i, checked_ptr p) { return p + i; }
  template <class I, if_index<I> = 0> checked_ptr operator-(I i) const { return *this + -static_cast<long long>(i); }
  template <class I, if_index<I> = 0> checked_ptr& operator+=(I i) { return *this = *this + i; }
  template <class I, if_index<I> = 0> checked_ptr& operator-=(I i) { return *this = *this - i; }
  checked_ptr& operator++() { ++offset; return *this; }
  checked_ptr& operator--() { --offset; return *this; }
  checked_ptr operator++(int) { checked_ptr before = *this; ++offset; return before; }
  checked_ptr operator--(int) { checked_ptr before = *this; --offset; return before; }
  // `&y[i]` of an output is a tracked_ptr (for atomicAdd); this makes `y + i` one too
  operator tracked_ptr<typename std::remove_const<T>::type>() const {
    return {info, const_cast<typename std::remove_const<T>::type*>(data), offset};
  }
};

// ---------------------------------------------------------------------------------------------------------
// __shared__ arrays. labops.rtc rewrites `__shared__ float tile[16][17];` into a function-static
// shared_array<float, 16, 17> (one per block at a time: blocks run one after another) and a view named
// `tile`; `extern __shared__ float s[];` into a view of the launch's dynamic shared memory.
// ---------------------------------------------------------------------------------------------------------
constexpr long long max_static_shared = 48 * 1024;  // bytes a block may declare statically (CUDA's limit)
static long long static_shared_bytes;               // declared by the running block so far
static unsigned long long static_shared_generation;
static long long dynamic_shared_bytes;              // the launch's shared_mem
static unsigned char* dynamic_shared_memory;

[[noreturn]] inline void report_too_much_shared(const char* name, long long bytes) {
  report& r = *shared_report;
  r.bug_kind = too_much_shared;
  set_name(name);
  r.bug_extent = bytes;
  stop_launch();
}

template <class T> struct shared_storage {
  array_info info;
  T* data;
  unsigned long long generation = 0;

  // A new block sees every element poisoned (all bits set: NaN for floats, -1 for ints) and unwritten.
  void enter_block(long long bytes_counted) {
    if (generation == now.generation) return;
    generation = now.generation;
    if (static_shared_generation != now.generation) {
      static_shared_generation = now.generation;
      static_shared_bytes = 0;
    }
    static_shared_bytes += bytes_counted;
    if (static_shared_bytes > max_static_shared) report_too_much_shared(info.name, static_shared_bytes);
    std::memset(static_cast<void*>(data), 0xFF, sizeof(T) * info.numel);
    std::memset(static_cast<void*>(info.marks), 0, sizeof(shadow) * info.numel);
  }
};

template <long long... D> struct extent_product { static constexpr long long value = 1; };
template <long long D0, long long... R> struct extent_product<D0, R...> {
  static constexpr long long value = D0 * extent_product<R...>::value;
};

// A view of a __shared__ array after some of its indices: view<T, 16, 17> is `tile`, view<T, 17> is
// `tile[i]`, and indexing the last dimension gives a ref<T>. Each index is checked against its own
// dimension (CUDA does not, but tile[i][17] of a [16][17] array is a bug even when it lands in tile[i+1]).
template <class T, long long... D> struct view;
template <class T, long long D0, long long... R> struct view<T, D0, R...> {
  shared_storage<T>* storage;
  long long base;
  long long indices[4];
  int depth;

  template <class I, if_index<I> = 0>
  typename std::conditional<sizeof...(R) == 0, ref<T>, view<T, R...>>::type operator[](I i) const {
    const long long index = static_cast<long long>(i);
    long long seen[4];
    for (int d = 0; d < depth && d < 4; ++d) seen[d] = indices[d];
    if (depth < 4) seen[depth] = index;
    if (static_cast<unsigned long long>(index) >= static_cast<unsigned long long>(D0) ||
        base + index * extent_product<R...>::value >= storage->info.numel)
      report_out_of_bounds(storage->info.name, base + index * extent_product<R...>::value, storage->info.numel,
                           false, seen, depth + 1);
    const long long at = base + index * extent_product<R...>::value;
    if constexpr (sizeof...(R) == 0) {
      return ref<T>{&storage->info, storage->data, at};
    } else {
      view<T, R...> inner{storage, at, {}, depth + 1};
      for (int d = 0; d <= depth && d < 4; ++d) inner.indices[d] = seen[d];
      return inner;
    }
  }
  // a one-dimensional array used as a pointer: s + i, atomicAdd(s + i, v)
  template <class I, if_index<I> = 0> tracked_ptr<T> operator+(I i) const {
    return {&storage->info, storage->data, base + static_cast<long long>(i)};
  }
  operator tracked_ptr<T>() const { return {&storage->info, storage->data, base}; }
};

template <class T, long long... D> struct shared_array {
  static constexpr long long numel = extent_product<D...>::value;
  static_assert(numel > 0, "a __shared__ array needs a size > 0 in every dimension");
  T data[numel];
  shadow marks[numel];
  shared_storage<T> storage;
  shared_array(const char* name) : data(), marks(), storage{{name, numel, marks, true}, data} {}

  view<T, D...> enter() {
    storage.enter_block(sizeof data);
    return view<T, D...>{&storage, 0, {}, 0};
  }
};

// A __shared__ scalar: `__shared__ float total;`
template <class T> struct shared_scalar {
  T data[1];
  shadow marks[1];
  shared_storage<T> storage;
  shared_scalar(const char* name) : data(), marks(), storage{{name, 1, marks, true}, data} {}
  ref<T> enter() {
    storage.enter_block(sizeof data);
    return ref<T>{&storage.info, data, 0};
  }
};

// `extern __shared__ T name[];`: the launch's shared_mem bytes, seen as T. Declarations with different
// names share the bytes, as on a GPU; each keeps its own marks.
template <class T> struct dynamic_shared {
  shadow* marks = nullptr;
  shared_storage<T> storage;
  dynamic_shared(const char* name) : storage{{name, 0, nullptr, true}, nullptr} {
    storage.info.numel = dynamic_shared_bytes / static_cast<long long>(sizeof(T));
    marks = static_cast<shadow*>(std::calloc(storage.info.numel ? storage.info.numel : 1, sizeof(shadow)));
    storage.info.marks = marks;
    storage.data = reinterpret_cast<T*>(dynamic_shared_memory);
  }
  view<T, (1LL << 40)> enter() {  // the extent is checked through info.numel below
    if (storage.generation != now.generation) {
      storage.generation = now.generation;
      std::memset(static_cast<void*>(storage.data), 0xFF, sizeof(T) * storage.info.numel);
      std::memset(static_cast<void*>(marks), 0, sizeof(shadow) * storage.info.numel);
    }
    return view<T, (1LL << 40)>{&storage, 0, {}, 0};
  }
};

// ---------------------------------------------------------------------------------------------------------
// Atomics: read-modify-write with no other thread in between (one core runs them all), tracked as atomic
// ---------------------------------------------------------------------------------------------------------
// What an atomic's address points to: `float` for a float* or a tracked pointer's ref<float>.
template <class R> struct element_of { using type = typename std::remove_cv<typename std::remove_reference<R>::type>::type; };
template <class T> struct element_of<ref<T>> { using type = T; };

template <class T, class F> inline T atomic_update(tracked_ptr<T> p, F update) {
  ref<T> r = p.at(p.offset);
  r.check(true);  // an atomic both reads and writes: outside the array it is reported as a write
  const bool log = recorded(*r.a);
  if (log) log_access(*r.a, r.index, true); else on_read(*r.a, r.index, true);
  T old = r.data[r.index];
  if (!log) on_write(*r.a, r.index, true);
  r.data[r.index] = update(old);
  return old;
}
template <class T, class F> inline T atomic_update(T* p, F update) {  // a plain pointer: not tracked
  T old = *p;
  *p = update(old);
  return old;
}
}  // namespace labops_rtc

#define LABOPS_RTC_ATOMIC(NAME, EXPR)                                                                   \
  template <class P, class V> inline auto NAME(P p, V v) {                                              \
    using E = typename labops_rtc::element_of<decltype(*p)>::type;                                      \
    return labops_rtc::atomic_update(labops_rtc_as_pointer<E>(p), [v](E old) { return static_cast<E>(EXPR); }); \
  }
template <class E> inline labops_rtc::tracked_ptr<E> labops_rtc_as_pointer(labops_rtc::tracked_ptr<E> p) { return p; }
// CUDA's atomicMax and atomicMin take integers only (a float max is an atomicCAS loop)
template <class E> inline E labops_rtc_integer(E v) {
  static_assert(std::is_integral<E>::value, "atomicMax and atomicMin take int, unsigned or long long, as in CUDA");
  return v;
}
template <class E> inline E* labops_rtc_as_pointer(E* p) { return p; }
template <class E, class T, typename std::enable_if<!std::is_const<T>::value, int>::type = 0>
inline labops_rtc::tracked_ptr<E> labops_rtc_as_pointer(const labops_rtc::checked_ptr<T>& p) {
  return p;
}
LABOPS_RTC_ATOMIC(atomicAdd, old + v)
LABOPS_RTC_ATOMIC(atomicSub, old - v)
LABOPS_RTC_ATOMIC(atomicMax, labops_rtc_integer(v > old ? v : old))
LABOPS_RTC_ATOMIC(atomicMin, labops_rtc_integer(v < old ? v : old))
LABOPS_RTC_ATOMIC(atomicExch, v)
LABOPS_RTC_ATOMIC(atomicAnd, old & v)
LABOPS_RTC_ATOMIC(atomicOr, old | v)
LABOPS_RTC_ATOMIC(atomicXor, old ^ v)
template <class P, class V> inline auto atomicCAS(P p, V compare, V value) {
  using E = typename labops_rtc::element_of<decltype(*p)>::type;
  return labops_rtc::atomic_update(labops_rtc_as_pointer<E>(p),
                                   [compare, value](E old) { return old == static_cast<E>(compare) ? static_cast<E>(value) : old; });
}
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }

namespace labops_rtc {
// ---------------------------------------------------------------------------------------------------------
// Fibers: a block's threads, switched at barriers and warp syncs
// ---------------------------------------------------------------------------------------------------------
enum fiber_state : int { runnable, at_barrier, at_warp_sync, finished };

struct fiber {
  int state;
  int line;              // the __syncthreads or warp op it waits at (the body's line)
  int site;              // which one: two on one line differ
  unsigned mask;         // the warp op's lane mask
  unsigned generation;   // the warp epoch when it arrived at a warp op
  long long predicate;   // __syncthreads_count / __ballot_sync
};
static fiber* fibers;
constexpr long long no_line = -1;

[[noreturn]] inline void report_divergence(int line, long long waiting, long long elsewhere, int elsewhere_line,
                                           int warp_op) {
  report& r = *shared_report;
  r.bug_kind = divergent_barrier;
  r.bug_line = line;
  r.bug_thread_a = waiting;
  r.bug_thread_b = elsewhere;
  r.bug_index = elsewhere_line;  // -1: it had finished
  r.bug_race = warp_op;          // 1: a warp op (shuffle, __syncwarp), 0: __syncthreads
  stop_launch();
}

#if LABOPS_RTC_FIBERS
static ucontext_t scheduler_context;
static ucontext_t* contexts;
inline void yield() { swapcontext(&contexts[me], &scheduler_context); }
#else
inline void yield() {}
#endif

inline void syncthreads(int line, int site, long long predicate = 0) {
  fibers[me].state = at_barrier;
  fibers[me].line = line;
  fibers[me].site = site;
  fibers[me].predicate = predicate;
  yield();
}

// The exchange of a warp op: each lane deposits a value for generation g in slot g % 2, waits for the
// warp, then reads. A lane cannot deposit for g + 2 before every lane has passed g + 1, so after reading g.
static unsigned long long exchange[max_warps][2][32];

inline unsigned warp_sync(unsigned mask, int line, unsigned long long value) {
  const unsigned warp = me / 32, lane = me % 32, generation = now.warp_epoch[warp];
  exchange[warp][generation % 2][lane] = value;
  fibers[me].state = at_warp_sync;
  fibers[me].line = line;
  fibers[me].mask = mask;
  fibers[me].generation = generation;
  yield();
  return generation;
}

template <class T> inline unsigned long long bits(T v) {
  unsigned long long b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T> inline T from_bits(unsigned long long b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// The lane a shuffle reads; its own lane when the source is outside its segment of `width` lanes.
template <class T> inline T shuffle(unsigned mask, T v, int line, int source, bool inside) {
  static_assert(sizeof(T) <= 8, "a warp shuffle moves values of at most 8 bytes");
  const unsigned generation = warp_sync(mask, line, bits(v));
  const unsigned warp = me / 32;
  if (!inside || warp * 32 + static_cast<unsigned>(source) >= now.threads) return v;
  return from_bits<T>(exchange[warp][generation % 2][source]);
}
inline int segment_start(int width) { return static_cast<int>(me % 32) & ~(width - 1); }
}  // namespace labops_rtc

template <class T> inline T labops_rtc_shfl(unsigned mask, T v, int src, int width, int line) {
  const int start = labops_rtc::segment_start(width);
  return labops_rtc::shuffle(mask, v, line, start + (src % width + width) % width, true);
}
template <class T> inline T labops_rtc_shfl_xor(unsigned mask, T v, int lane_mask, int width, int line) {
  const int lane = static_cast<int>(labops_rtc::me % 32), source = lane ^ lane_mask;
  const int start = labops_rtc::segment_start(width);
  return labops_rtc::shuffle(mask, v, line, source, source >= start && source < start + width);
}
template <class T> inline T labops_rtc_shfl_down(unsigned mask, T v, unsigned delta, int width, int line) {
  const int lane = static_cast<int>(labops_rtc::me % 32), start = labops_rtc::segment_start(width);
  return labops_rtc::shuffle(mask, v, line, lane + static_cast<int>(delta), lane - start + static_cast<int>(delta) < width);
}
template <class T> inline T labops_rtc_shfl_up(unsigned mask, T v, unsigned delta, int width, int line) {
  const int lane = static_cast<int>(labops_rtc::me % 32), start = labops_rtc::segment_start(width);
  return labops_rtc::shuffle(mask, v, line, lane - static_cast<int>(delta), lane - start >= static_cast<int>(delta));
}
inline unsigned labops_rtc_ballot(unsigned mask, bool predicate, int line) {
  const unsigned generation = labops_rtc::warp_sync(mask, line, predicate ? 1 : 0);
  const unsigned warp = labops_rtc::me / 32;
  unsigned result = 0;
  for (unsigned lane = 0; lane < 32 && warp * 32 + lane < labops_rtc::now.threads; ++lane)
    if ((mask >> lane & 1) && labops_rtc::exchange[warp][generation % 2][lane]) result |= 1u << lane;
  return result;
}
inline long long labops_rtc_syncthreads_count(long long predicate, int line, int site) {
  labops_rtc::syncthreads(line, site, predicate ? 1 : 0);
  long long count = 0;
  for (unsigned t = 0; t < labops_rtc::now.threads; ++t) count += labops_rtc::fibers[t].predicate;
  return count;
}
// Arguments may be proxies (s[i]): their value is read once, here.
template <class T> inline auto labops_rtc_value(const T& v) {
  if constexpr (std::is_class<T>::value) return v.get(); else return v;
}
// rtc.py numbers each call in the body (_number_barriers): two barriers on one line are two sites
#define labops_rtc_syncthreads_at(site) labops_rtc::syncthreads(__LINE__, (site))
#define labops_rtc_syncthreads_count_at(site, p) labops_rtc_syncthreads_count((p), __LINE__, (site))
#define labops_rtc_syncthreads_and_at(site, p) (labops_rtc_syncthreads_count(!(p), __LINE__, (site)) == 0)
#define labops_rtc_syncthreads_or_at(site, p) (labops_rtc_syncthreads_count((p), __LINE__, (site)) != 0)
#define __syncwarp(...) labops_rtc::warp_sync(labops_rtc_mask(__VA_ARGS__), __LINE__, 0)
inline unsigned labops_rtc_mask() { return 0xffffffffu; }
inline unsigned labops_rtc_mask(unsigned m) { return m; }
#define LABOPS_RTC_WIDTH(...) labops_rtc_width(__VA_ARGS__)
inline int labops_rtc_width() { return 32; }
inline int labops_rtc_width(int w) { return w; }
#define __shfl_sync(m, v, s, ...) labops_rtc_shfl((m), labops_rtc_value(v), (s), labops_rtc_width(__VA_ARGS__), __LINE__)
#define __shfl_xor_sync(m, v, s, ...) labops_rtc_shfl_xor((m), labops_rtc_value(v), (s), labops_rtc_width(__VA_ARGS__), __LINE__)
#define __shfl_down_sync(m, v, s, ...) labops_rtc_shfl_down((m), labops_rtc_value(v), (s), labops_rtc_width(__VA_ARGS__), __LINE__)
#define __shfl_up_sync(m, v, s, ...) labops_rtc_shfl_up((m), labops_rtc_value(v), (s), labops_rtc_width(__VA_ARGS__), __LINE__)
#define __ballot_sync(m, p) labops_rtc_ballot((m), (p), __LINE__)
#define __any_sync(m, p) (labops_rtc_ballot((m), (p), __LINE__) != 0)
#define __all_sync(m, p) (labops_rtc_ballot((m), (p), __LINE__) == ((m) & labops_rtc_ballot((m), true, __LINE__)))
#define __activemask() 0xffffffffu
#define __threadfence() ((void)0)
#define __threadfence_block() ((void)0)

// The CUDA math names a body is likely to use (CUDA has them for device code).
template <class A, class B> inline auto min(A a, B b) {
  auto x = labops_rtc_value(a); auto y = labops_rtc_value(b);
  using C = typename std::common_type<decltype(x), decltype(y)>::type;
  return y < x ? static_cast<C>(y) : static_cast<C>(x);
}
template <class A, class B> inline auto max(A a, B b) {
  auto x = labops_rtc_value(a); auto y = labops_rtc_value(b);
  using C = typename std::common_type<decltype(x), decltype(y)>::type;
  return x < y ? static_cast<C>(y) : static_cast<C>(x);
}
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldg(labops_rtc::checked_ptr<const T> p) { return *p; }
// CUDA's __half on the CPU: 16 bits, converted to and from float with round-to-nearest-even as
// cuda_fp16.h's __float2half does. Arithmetic goes through float (on a GPU __half operators round to
// __half after each operation: a chain of them can differ in the last bit).
struct __half {
  unsigned short bits;
  __half() = default;
  __half(float f) : bits(from_float(f)) {}
  __half(double d) : bits(from_float(static_cast<float>(d))) {}
  __half(int i) : bits(from_float(static_cast<float>(i))) {}
  operator float() const { return to_float(bits); }
  static unsigned short from_float(float f) {
    unsigned u;
    std::memcpy(&u, &f, 4);
    const unsigned sign = (u >> 16) & 0x8000u, exponent = (u >> 23) & 0xFFu;
    unsigned mantissa = u & 0x7FFFFFu;
    if (exponent == 0xFF) return static_cast<unsigned short>(sign | 0x7C00u | (mantissa ? 0x200u : 0u));
    const int e = static_cast<int>(exponent) - 127 + 15;
    if (e >= 31) return static_cast<unsigned short>(sign | 0x7C00u);  // too large: infinity
    if (e <= 0) {                                                      // subnormal or zero
      if (e < -10) return static_cast<unsigned short>(sign);
      mantissa |= 0x800000u;
      const unsigned shift = static_cast<unsigned>(14 - e), half_mantissa = mantissa >> shift;
      const unsigned rest = mantissa & ((1u << shift) - 1), halfway = 1u << (shift - 1);
      const unsigned rounded = half_mantissa + (rest > halfway || (rest == halfway && (half_mantissa & 1u)));
      return static_cast<unsigned short>(sign | rounded);
    }
    const unsigned rest = mantissa & 0x1FFFu, halfway = 0x1000u;
    unsigned result = sign | (static_cast<unsigned>(e) << 10) | (mantissa >> 13);
    if (rest > halfway || (rest == halfway && (result & 1u))) ++result;  // may carry into the exponent
    return static_cast<unsigned short>(result);
  }
  static float to_float(unsigned short h) {
    const unsigned sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
    unsigned u;
    if (exponent == 0x1F) {
      u = sign | 0x7F800000u | (mantissa << 13);
    } else if (exponent == 0) {
      if (mantissa == 0) {
        u = sign;
      } else {  // subnormal: normalise
        int e = -1;
        unsigned m = mantissa;
        do { ++e; m <<= 1; } while (!(m & 0x400u));
        u = sign | (static_cast<unsigned>(127 - 15 - e) << 23) | ((m & 0x3FFu) << 13);
      }
    } else {
      u = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
inline float __half2float(__half h) { return static_cast<float>(h); }
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }

// CUDA's vector types, for 8- and 16-byte loads through a plain pointer: `*(const float4*)&x[i]`. The
// plain pointer is not tracked, so its reads and writes are not checked.
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(static_cast<unsigned>(x)) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }
static const int warpSize = 32;
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __align__(n) alignas(n)

namespace labops_rtc {
// ---------------------------------------------------------------------------------------------------------
// The launch: blocks one after another; in a block, every runnable fiber in turn until all wait, then the
// warps whose lanes have all arrived, then the barrier once every thread is at it.
// ---------------------------------------------------------------------------------------------------------
static dim3 grid_shape, block_shape;
static void (*run_thread)(void* body, uint3 block, uint3 thread);
static void* thread_body;
static uint3 running_block;

inline uint3 thread_at(unsigned t) {
  return {t % block_shape.x, (t / block_shape.x) % block_shape.y, t / (block_shape.x * block_shape.y)};
}

#if LABOPS_RTC_FIBERS
constexpr size_t stack_bytes = 256 * 1024;
static char* stacks;
static size_t page_bytes;

static void fiber_main() {
  run_thread(thread_body, running_block, thread_at(me));
  fibers[me].state = finished;
}  // returning resumes scheduler_context (uc_link)

inline void start_fibers(unsigned n) {
  for (unsigned t = 0; t < n; ++t) {
    getcontext(&contexts[t]);
    // each stack sits above a guard page, so an overflow is a SIGSEGV, not another fiber's stack
    contexts[t].uc_stack.ss_sp = stacks + t * (stack_bytes + page_bytes) + page_bytes;
    contexts[t].uc_stack.ss_size = stack_bytes;
    contexts[t].uc_link = &scheduler_context;
    makecontext(&contexts[t], fiber_main, 0);
    fibers[t] = {runnable, 0, 0, 0, 0, 0};
  }
}

inline bool release_warps(unsigned n) {
  bool released = false;
  for (unsigned warp = 0; warp * 32 < n; ++warp) {
    const unsigned lanes = std::min(32u, n - warp * 32);
    unsigned waiting = 0, mask = 0;
    for (unsigned lane = 0; lane < lanes; ++lane)
      if (fibers[warp * 32 + lane].state == at_warp_sync) {
        waiting |= 1u << lane;
        mask |= fibers[warp * 32 + lane].mask;
      }
    const unsigned existing = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    const unsigned required = mask & existing;
    if (!waiting || (waiting & required) != required) continue;
    ++now.warp_epoch[warp];
    for (unsigned lane = 0; lane < lanes; ++lane)
      if (waiting >> lane & 1) fibers[warp * 32 + lane].state = runnable;
    released = true;
  }
  return released;
}

// Nothing can run: some thread waits where another of its block (or warp) will never come.
[[noreturn]] inline void report_stuck(unsigned n) {
  for (unsigned t = 0; t < n; ++t) {
    if (fibers[t].state != at_warp_sync) continue;
    const unsigned warp = t / 32, lanes = std::min(32u, n - warp * 32);
    for (unsigned lane = 0; lane < lanes; ++lane) {
      const unsigned other = warp * 32 + lane;
      if ((fibers[t].mask >> lane & 1) && fibers[other].state != at_warp_sync)
        report_divergence(fibers[t].line, global_id(t), global_id(other),
                          fibers[other].state == finished ? no_line : fibers[other].line, 1);
    }
  }
  for (unsigned t = 0; t < n; ++t)
    if (fibers[t].state == at_barrier)
      for (unsigned other = 0; other < n; ++other)
        if (fibers[other].state != at_barrier || fibers[other].site != fibers[t].site)
          report_divergence(fibers[t].line, global_id(t), global_id(other),
                            fibers[other].state == finished ? no_line : fibers[other].line, 0);
  std::abort();  // unreachable: something waits, so one of the loops above reports
}

inline void run_block(unsigned n) {
  start_fibers(n);
  for (;;) {
    for (unsigned t = 0; t < n; ++t) {
      if (fibers[t].state != runnable) continue;
      me = t;
      swapcontext(&scheduler_context, &contexts[t]);
    }
    if (release_warps(n)) continue;
    unsigned at_barrier_count = 0, finished_count = 0;
    for (unsigned t = 0; t < n; ++t) {
      at_barrier_count += fibers[t].state == at_barrier;
      finished_count += fibers[t].state == finished;
    }
    if (finished_count == n) return;
    if (at_barrier_count != n) report_stuck(n);
    for (unsigned t = 1; t < n; ++t)
      if (fibers[t].site != fibers[0].site) report_stuck(n);
    if (uninitialized.name) report_uninitialized();  // read before any thread wrote it, and none did since
    ++now.epoch;
    for (unsigned t = 0; t < n; ++t) fibers[t].state = runnable;
  }
}
#else
inline void run_block(unsigned n) {  // no thread waits for another: each runs to its end
  for (unsigned t = 0; t < n; ++t) {
    me = t;
    fibers[t].state = runnable;
    run_thread(thread_body, running_block, thread_at(t));
    fibers[t].state = finished;
  }
}
#endif

template <class F> inline void launch_grid(dim3 grid, dim3 block, long long shared_bytes, F& body) {
  grid_shape = grid;
  block_shape = block;
  run_thread = [](void* f, uint3 b, uint3 t) { (*static_cast<F*>(f))(b, t); };
  thread_body = &body;
  const unsigned n = block.x * block.y * block.z;
  now.threads = n;
  dynamic_shared_bytes = shared_bytes;
  dynamic_shared_memory = static_cast<unsigned char*>(std::calloc(shared_bytes ? shared_bytes : 1, 1));
  fibers = static_cast<fiber*>(std::calloc(n, sizeof(fiber)));
#if LABOPS_RTC_FIBERS
  page_bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  contexts = static_cast<ucontext_t*>(std::calloc(n, sizeof(ucontext_t)));
  const size_t total = n * (stack_bytes + page_bytes);
  stacks = static_cast<char*>(mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                                   -1, 0));
  if (stacks == MAP_FAILED) std::abort();
  for (unsigned t = 0; t < n; ++t) mprotect(stacks + t * (stack_bytes + page_bytes), page_bytes, PROT_NONE);
#endif
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        running_block = {bx, by, bz};
        now.block = (static_cast<long long>(bz) * grid.y + by) * grid.x + bx;
        ++now.generation;
        now.epoch = 0;
        std::memset(now.warp_epoch, 0, sizeof now.warp_epoch);
        uninitialized = {nullptr, 0, 0};
        run_block(n);
        if (uninitialized.name) report_uninitialized();
      }
}
}  // namespace labops_rtc
