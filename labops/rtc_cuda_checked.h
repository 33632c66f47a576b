// The checks of rtc_cpu.h, on a GPU: what a checked launch of labops.rtc compiles with NVRTC
// (`k(..., checked=True)` on CUDA tensors; see "Checked launches on a GPU" in labops/rtc.py).
//
// The body is the same; its tensors and __shared__ arrays become the same kind of proxies as on the CPU,
// each access checked against its array's size and recorded in a shadow word per element (which thread
// wrote or read it last, after how many barriers). Here the block's threads really run at once: each access
// publishes its mark with an atomic exchange before it reads the other's, so of two conflicting accesses the
// second always sees the first. __syncthreads counts the threads that reach it; a warp operation checks that
// the lanes of its mask are all there. Of the bugs found, the report keeps the one the CPU would have found
// first (claim), and the launch goes on without the bad access: a checked launch never faults.
namespace labops_rtc {

template <class T> struct is_const_t { static const bool value = false; };
template <class T> struct is_const_t<const T> { static const bool value = true; };
template <class T> struct remove_const_t { typedef T type; };
template <class T> struct remove_const_t<const T> { typedef T type; };
template <bool B, class T, class F> struct conditional_t { typedef T type; };
template <class T, class F> struct conditional_t<false, T, F> { typedef F type; };

enum : long long { no_bug = 0, out_of_bounds = 1, data_race = 2, divergent_barrier = 3, uninitialized_read = 4 };
enum : long long { read_before_write = 1, write_after_read = 2, two_writes = 3 };

struct report {  // rtc.py's _DEVICE_REPORT_FIELDS, in order
  unsigned long long claimed;
  long long kind, index, extent, write, line, race, thread_a, thread_b, depth, indices[4], name;
  unsigned long long key;  // rtc.py starts it at all ones
  int lock, pad;
};

// A shadow word: bits 0-39 a global thread index + 1 (0: nobody; all ones: several readers), 40-55 the
// barriers that thread had passed, 56-62 its warp's syncs, 63 an atomic write.
constexpr unsigned long long id_bits = (1ULL << 40) - 1, many = id_bits;
struct shadow { unsigned long long writer, reader; };

struct thread_context {
  report* out;
  long long self, block;
  unsigned threads, me, epoch, warp_epoch;
  int pending_name;            // a __shared__ element read before anyone wrote it (-1: none)
  long long pending_index;
};

struct array_info {
  int name;                    // its place in rtc.py's list: tensors, then __shared__ arrays
  long long numel;
  shadow* marks;               // null for an input
  bool is_shared;
};

__device__ unsigned char sink[64];  // where an access outside every array goes instead

// Which bug the report keeps: the one the CPU would have found first. The CPU runs blocks in order, and in a
// block the epochs (barriers passed) in order, the threads in order within one, and it checks a barrier
// (not every thread reached it, then a read of unwritten shared memory) after the epoch's accesses. A
// bug's key is that order; the smallest key wins, whatever order the GPU found them in.
constexpr unsigned at_barrier_order = 0xFFFE, at_uninitialized_order = 0xFFFF;

__device__ inline unsigned long long order_key(const thread_context& c, unsigned order) {
  const unsigned long long block = c.block < (1LL << 24) ? c.block : (1LL << 24) - 1;
  const unsigned long long epoch = c.epoch < (1u << 24) ? c.epoch : (1u << 24) - 1;
  return block << 40 | epoch << 16 | order;
}

// Takes the report's lock when this bug comes before the one it holds; the caller fills it, then release().
__device__ inline bool claim(thread_context& c, long long kind, unsigned order) {
  const unsigned long long key = order_key(c, order);
  if (key >= *static_cast<volatile unsigned long long*>(&c.out->key)) return false;
  while (atomicCAS(&c.out->lock, 0, 1) != 0) {}
  __threadfence();
  if (key >= c.out->key) {
    __threadfence();
    atomicExch(&c.out->lock, 0);
    return false;
  }
  c.out->key = key;
  c.out->claimed = 1;
  c.out->kind = kind;
  c.out->thread_a = c.self;
  c.out->thread_b = 0;
  c.out->depth = 0;
  return true;
}

__device__ inline void release(thread_context& c) {
  __threadfence();
  atomicExch(&c.out->lock, 0);
}

__device__ inline void report_out_of_bounds(thread_context& c, int name, long long index, long long numel,
                                            bool write, const long long* indices = nullptr, int depth = 0) {
  if (!claim(c, out_of_bounds, c.me)) return;
  c.out->name = name;
  c.out->index = index;
  c.out->extent = numel;
  c.out->write = write ? 1 : 0;
  c.out->depth = depth;
  for (int d = 0; d < depth && d < 4; ++d) c.out->indices[d] = indices[d];
  release(c);
}

__device__ inline unsigned long long stamp(const thread_context& c, bool atomic) {
  return static_cast<unsigned long long>(c.self + 1) | (static_cast<unsigned long long>(c.epoch & 0xFFFF) << 40) |
         (static_cast<unsigned long long>(c.warp_epoch & 0x7F) << 56) | (atomic ? 1ULL << 63 : 0ULL);
}

// Whether the access recorded in `word` is ordered before what this thread does now.
__device__ inline bool ordered(const thread_context& c, unsigned long long word) {
  const long long thread = static_cast<long long>(word & id_bits) - 1;
  if (thread == c.self) return true;
  if (thread / c.threads != c.block) return false;
  if (((word >> 40) & 0xFFFF) != (c.epoch & 0xFFFF)) return true;
  return (thread % c.threads) / 32 == c.me / 32 && ((word >> 56) & 0x7F) != (c.warp_epoch & 0x7F);
}

__device__ inline void report_race(thread_context& c, const array_info& a, long long index, long long kind,
                                   unsigned long long other) {
  if (!claim(c, data_race, c.me)) return;
  c.out->name = a.name;
  c.out->index = index;
  c.out->race = kind;
  c.out->thread_a = (other & id_bits) == many ? -1 : static_cast<long long>(other & id_bits) - 1;
  c.out->thread_b = c.self;
  c.out->write = a.is_shared ? 1 : 0;
  release(c);
}

// Each access publishes its mark with an atomic exchange, then (after a fence) reads the other kind of mark:
// of two conflicting accesses, whichever comes second sees the first, even when they run at the same time.
__device__ inline void on_read(thread_context& c, const array_info& a, long long index, bool atomic = false) {
  shadow& s = a.marks[index];
  if (!atomic) {
    const unsigned long long before = atomicExch(&s.reader, stamp(c, false));
    const bool alone = !(before & id_bits) || ((before & id_bits) != many && ordered(c, before));
    if (!alone) atomicExch(&s.reader, (stamp(c, false) & ~id_bits) | many);
  }
  __threadfence();
  const unsigned long long writer = *static_cast<volatile unsigned long long*>(&s.writer);
  if ((writer & id_bits) && !ordered(c, writer) && !(atomic && (writer >> 63)))
    report_race(c, a, index, read_before_write, writer);
  if (!(writer & id_bits) && a.is_shared && c.pending_name < 0) {
    c.pending_name = a.name;
    c.pending_index = index;
  }
}

__device__ inline void on_write(thread_context& c, const array_info& a, long long index, bool atomic = false) {
  shadow& s = a.marks[index];
  const unsigned long long writer = atomicExch(&s.writer, stamp(c, atomic));
  __threadfence();
  const unsigned long long reader = *static_cast<volatile unsigned long long*>(&s.reader);
  if ((writer & id_bits) && !ordered(c, writer) && !(atomic && (writer >> 63)))
    report_race(c, a, index, two_writes, writer);
  else if ((reader & id_bits) == many ? ((reader >> 40) & 0xFFFF) == (c.epoch & 0xFFFF) && !ordered(c, reader)
                                      : (reader & id_bits) && !ordered(c, reader))
    report_race(c, a, index, write_after_read, reader);
}

template <class T> struct tracked_ptr;

template <class T> struct ref {
  const array_info* a;
  T* data;
  long long index;
  thread_context* c;

  __device__ bool inside(bool write) const {
    if (static_cast<unsigned long long>(index) < static_cast<unsigned long long>(a->numel)) return true;
    report_out_of_bounds(*c, a->name, index, a->numel, write);
    return false;
  }
  __device__ T get() const {
    if (!inside(false)) return T();
    on_read(*c, *a, index);
    return data[index];
  }
  __device__ void set(T v) const {
    if (!inside(true)) return;
    on_write(*c, *a, index);
    data[index] = v;
  }
  __device__ operator T() const { return get(); }
  __device__ const ref& operator=(T v) const { set(v); return *this; }
  __device__ const ref& operator=(const ref& other) const { set(other.get()); return *this; }
  template <class U> __device__ const ref& operator+=(U v) const { T old = get(); set(static_cast<T>(old + v)); return *this; }
  template <class U> __device__ const ref& operator-=(U v) const { T old = get(); set(static_cast<T>(old - v)); return *this; }
  template <class U> __device__ const ref& operator*=(U v) const { T old = get(); set(static_cast<T>(old * v)); return *this; }
  template <class U> __device__ const ref& operator/=(U v) const { T old = get(); set(static_cast<T>(old / v)); return *this; }
  __device__ T operator++() const { T v = static_cast<T>(get() + 1); set(v); return v; }
  __device__ T operator--() const { T v = static_cast<T>(get() - 1); set(v); return v; }
  __device__ T operator++(int) const { T v = get(); set(static_cast<T>(v + 1)); return v; }
  __device__ T operator--(int) const { T v = get(); set(static_cast<T>(v - 1)); return v; }
  __device__ tracked_ptr<T> operator&() const { return {a, data, index, c}; }
};

template <class T> struct tracked_ptr {
  const array_info* a;
  T* data;
  long long offset;
  thread_context* c;

  template <class I> __device__ ref<T> operator[](I i) const { return {a, data, offset + static_cast<long long>(i), c}; }
  __device__ ref<T> operator*() const { return {a, data, offset, c}; }
  template <class I> __device__ tracked_ptr operator+(I i) const { return {a, data, offset + static_cast<long long>(i), c}; }
  template <class I> __device__ tracked_ptr operator-(I i) const { return {a, data, offset - static_cast<long long>(i), c}; }
  __device__ operator T*() const { return data + offset; }
  template <class U> __device__ explicit operator U*() const { return reinterpret_cast<U*>(data + offset); }
};

// A tensor's name in the body: an input's x[i] is a checked value, an output's a ref<T>.
template <class T> struct checked_ptr {
  typedef typename conditional_t<is_const_t<T>::value, T, ref<T>>::type element_ref;
  T* data;
  long long offset;
  const array_info* info;
  thread_context* c;

  __device__ checked_ptr(T* first, const array_info* i, thread_context* context)
      : data(first), offset(0), info(i), c(context) {}
  __device__ element_ref element(long long index) const {
    if constexpr (is_const_t<T>::value) {
      if (static_cast<unsigned long long>(index) >= static_cast<unsigned long long>(info->numel)) {
        report_out_of_bounds(*c, info->name, index, info->numel, false);
        return T();
      }
      return data[index];
    } else {
      return ref<T>{info, data, index, c};
    }
  }
  template <class I> __device__ element_ref operator[](I i) const { return element(offset + static_cast<long long>(i)); }
  __device__ element_ref operator*() const { return element(offset); }
  __device__ operator T*() const { return data + offset; }
  template <class I> __device__ checked_ptr operator+(I i) const { checked_ptr p = *this; p.offset += static_cast<long long>(i); return p; }
  template <class I> __device__ checked_ptr operator-(I i) const { checked_ptr p = *this; p.offset -= static_cast<long long>(i); return p; }
  template <class I> __device__ checked_ptr& operator+=(I i) { offset += static_cast<long long>(i); return *this; }
  template <class I> __device__ checked_ptr& operator-=(I i) { offset -= static_cast<long long>(i); return *this; }
  __device__ checked_ptr& operator++() { ++offset; return *this; }
  __device__ checked_ptr operator++(int) { checked_ptr p = *this; ++offset; return p; }
  __device__ operator tracked_ptr<typename remove_const_t<T>::type>() const {
    return {info, const_cast<typename remove_const_t<T>::type*>(data), offset, c};
  }
};

template <long long... D> struct extent_product { static constexpr long long value = 1; };
template <long long D0, long long... R> struct extent_product<D0, R...> {
  static constexpr long long value = D0 * extent_product<R...>::value;
};

template <class T, long long... D> struct view;
template <class T, long long D0, long long... R> struct view<T, D0, R...> {
  T* data;
  const array_info* info;
  thread_context* c;
  long long base;
  long long indices[4];
  int depth;

  template <class I>
  __device__ typename conditional_t<sizeof...(R) == 0, ref<T>, view<T, R...>>::type operator[](I i) const {
    const long long index = static_cast<long long>(i), at = base + index * extent_product<R...>::value;
    long long seen[4];
    for (int d = 0; d < depth && d < 4; ++d) seen[d] = indices[d];
    if (depth < 4) seen[depth] = index;
    long long safe = at;
    if (static_cast<unsigned long long>(index) >= static_cast<unsigned long long>(D0) || at >= info->numel) {
      report_out_of_bounds(*c, info->name, at, info->numel, false, seen, depth + 1);
      safe = -1;  // a ref outside the array: its access is dropped
    }
    if constexpr (sizeof...(R) == 0) {
      return ref<T>{info, data, safe, c};
    } else {
      view<T, R...> inner{data, info, c, safe < 0 ? 0 : safe, {0, 0, 0, 0}, depth + 1};
      for (int d = 0; d <= depth && d < 4; ++d) inner.indices[d] = seen[d];
      return inner;
    }
  }
  template <class I> __device__ tracked_ptr<T> operator+(I i) const { return {info, data, base + static_cast<long long>(i), c}; }
  __device__ operator tracked_ptr<T>() const { return {info, data, base, c}; }
};

// Every thread reaches a __shared__ declaration: it clears a share of the marks and poisons a share of the
// data, and a barrier (not counted as the body's) makes the block see all of it.
__device__ inline void enter_shared(thread_context& c, void* data, long long bytes, shadow* marks, long long numel) {
  for (long long i = c.me; i < numel; i += c.threads) marks[i] = {0ULL, 0ULL};
  for (long long i = c.me; i < bytes; i += c.threads) static_cast<unsigned char*>(data)[i] = 0xFF;
  __syncthreads();
}

template <class T, long long... D> struct shared_array {
  static constexpr long long numel = extent_product<D...>::value;
  T data[numel];
  shadow marks[numel];
  array_info info;

  __device__ view<T, D...> enter(thread_context& c, int name) {
    if (c.me == 0) info = {name, numel, marks, true};
    enter_shared(c, data, sizeof data, marks, numel);
    return view<T, D...>{data, &info, &c, 0, {0, 0, 0, 0}, 0};
  }
};

template <class T> struct shared_scalar {
  T data[1];
  shadow marks[1];
  array_info info;
  __device__ ref<T> enter(thread_context& c, int name) {
    if (c.me == 0) info = {name, 1, marks, true};
    enter_shared(c, data, sizeof data, marks, 1);
    return ref<T>{&info, data, 0, &c};
  }
};

// extern __shared__: the data is the launch's dynamic shared memory, the marks a slice of a global buffer
// (one per block: rtc.py sizes it from shared_mem and the grid).
template <class T> __device__ inline view<T, (1LL << 40)> enter_dynamic(thread_context& c, T* data, int name,
                                                                      shadow* all_marks, long long bytes,
                                                                      array_info& info) {
  const long long numel = bytes / static_cast<long long>(sizeof(T));
  shadow* marks = all_marks + c.block * bytes;
  info = {name, numel, marks, true};
  enter_shared(c, data, numel * static_cast<long long>(sizeof(T)), marks, numel);
  return view<T, (1LL << 40)>{data, &info, &c, 0, {0, 0, 0, 0}, 0};
}

__device__ inline void check_pending(thread_context& c) {
  if (c.pending_name < 0) return;
  if (claim(c, uninitialized_read, at_uninitialized_order)) {
    c.out->name = c.pending_name;
    c.out->index = c.pending_index;
    release(c);
  }
  c.pending_name = -1;
}

// __syncthreads, counted: every thread of the block must arrive, at the same one (sites compared bit by bit).
__device__ inline void barrier(thread_context& c, int line, int site, int* predicate_count = nullptr,
                               int predicate = 0) {
  const int arrived = __syncthreads_count(1);
  bool same_site = true;
  for (int bit = 0; bit < 12; ++bit) {
    const int ones = __syncthreads_count((site >> bit) & 1);
    same_site = same_site && (ones == 0 || ones == arrived);
  }
  if (predicate_count) *predicate_count = __syncthreads_count(predicate);
  if ((arrived != static_cast<int>(c.threads) || !same_site) && claim(c, divergent_barrier, at_barrier_order)) {
    c.out->line = line;
    c.out->index = arrived;  // how many threads arrived (rtc.py names the rest)
    c.out->race = 0;
    release(c);
  }
  check_pending(c);
  ++c.epoch;
}

// A warp operation: the lanes its mask names (that exist in the block) must all be here.
__device__ inline void warp_op(thread_context& c, unsigned mask, int line) {
  const unsigned first = (c.me / 32) * 32;
  const unsigned lanes = c.threads - first < 32 ? c.threads - first : 32;
  const unsigned existing = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  const unsigned required = mask & existing;
  __syncwarp(required);  // the lanes converge here (the body's own op would sync them too): then look
  const unsigned here = __activemask();
  if ((here & required) != required && claim(c, divergent_barrier, c.me)) {
    c.out->line = line;
    c.out->index = __popc(here & required);
    c.out->race = 1;
    release(c);
  }
  ++c.warp_epoch;
}

template <class T, class F> __device__ inline T atomic_tracked(tracked_ptr<T> p, F native) {
  ref<T> r{p.a, p.data, p.offset, p.c};
  if (!r.inside(true)) return T();
  on_read(*p.c, *p.a, p.offset, true);
  on_write(*p.c, *p.a, p.offset, true);
  return native(p.data + p.offset);
}
template <class T> __device__ inline tracked_ptr<T> as_tracked(tracked_ptr<T> p) { return p; }
template <class T> __device__ inline tracked_ptr<T> as_tracked(checked_ptr<T> p) { return p; }
template <class T> __device__ inline T value_of(const T& v) { return v; }
template <class T> __device__ inline T value_of(const ref<T>& v) { return v.get(); }
}  // namespace labops_rtc

#define LABOPS_RTC_ATOMIC(NAME)                                                                           \
  template <class T, class V> __device__ inline T NAME(labops_rtc::tracked_ptr<T> p, V v) {               \
    return labops_rtc::atomic_tracked(p, [&](T* raw) { return ::NAME(raw, static_cast<T>(labops_rtc::value_of(v))); }); \
  }                                                                                                       \
  template <class T, class V> __device__ inline T NAME(labops_rtc::checked_ptr<T> p, V v) {               \
    return NAME(labops_rtc::as_tracked(p), v);                                                            \
  }
LABOPS_RTC_ATOMIC(atomicAdd)
LABOPS_RTC_ATOMIC(atomicSub)
LABOPS_RTC_ATOMIC(atomicMax)
LABOPS_RTC_ATOMIC(atomicMin)
LABOPS_RTC_ATOMIC(atomicExch)
template <class T, class V> __device__ inline T atomicCAS(labops_rtc::tracked_ptr<T> p, V compare, V value) {
  return labops_rtc::atomic_tracked(p, [&](T* raw) { return ::atomicCAS(raw, static_cast<T>(compare), static_cast<T>(value)); });
}

// rtc.py numbers each call in the body (_number_barriers): two barriers on one line are two sites
#define labops_rtc_syncthreads_at(site) labops_rtc::barrier(labops_rtc_context, __LINE__, (site))
#define __syncwarp(...) (labops_rtc::warp_op(labops_rtc_context, labops_rtc_mask(__VA_ARGS__), __LINE__), __syncwarp(__VA_ARGS__))
__device__ inline unsigned labops_rtc_mask() { return 0xffffffffu; }
__device__ inline unsigned labops_rtc_mask(unsigned m) { return m; }
#define LABOPS_RTC_WARP(NATIVE, m, v, ...) \
  (labops_rtc::warp_op(labops_rtc_context, (m), __LINE__), NATIVE((m), labops_rtc::value_of(v), __VA_ARGS__))
#define __shfl_sync(m, v, ...) LABOPS_RTC_WARP(__shfl_sync, m, v, __VA_ARGS__)
#define __shfl_xor_sync(m, v, ...) LABOPS_RTC_WARP(__shfl_xor_sync, m, v, __VA_ARGS__)
#define __shfl_down_sync(m, v, ...) LABOPS_RTC_WARP(__shfl_down_sync, m, v, __VA_ARGS__)
#define __shfl_up_sync(m, v, ...) LABOPS_RTC_WARP(__shfl_up_sync, m, v, __VA_ARGS__)
#define __ballot_sync(m, p) (labops_rtc::warp_op(labops_rtc_context, (m), __LINE__), __ballot_sync((m), (p)))
__device__ inline int labops_rtc_syncthreads_count(labops_rtc::thread_context& c, int predicate, int line, int site) {
  int count = 0;
  labops_rtc::barrier(c, line, site, &count, predicate);
  return count;
}
#define labops_rtc_syncthreads_count_at(site, p) labops_rtc_syncthreads_count(labops_rtc_context, (p), __LINE__, (site))
#define labops_rtc_syncthreads_and_at(site, p) (labops_rtc_syncthreads_count(labops_rtc_context, !(p), __LINE__, (site)) == 0)
#define labops_rtc_syncthreads_or_at(site, p) (labops_rtc_syncthreads_count(labops_rtc_context, (p), __LINE__, (site)) != 0)
