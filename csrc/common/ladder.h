// Note [the ladder]
// A layer's forward is built as a ladder, as llm.c's dev/cuda/layernorm_forward.cu numbers its
// kernels: rung 1 is the textbook body (the per-element or per-plane math of <layer>.h, run
// plainly), each later rung a faster kernel of the same math. Every rung is named, can be forced
// from Python (labops/ladder.py: `with ladder.use("pooling", 1): ...`) and is tested against
// rung 1 (tests/test_ladder.py); the benchmark times them all in one run (`labops bench --ladder`).
//
// A layer declares its rungs once, in its own folder (a `forward_ladder()` in its entry.h), and
// registers the ladder in its register.cpp (a `Registration`, which LABOPS_REGISTER_LAYER of
// register_layer.h writes); the ops of csrc/common/register.cpp read them by the layer's name. Per
// call the launcher pays one relaxed atomic load (the forced rung, read once by the entry) and,
// only when the rung differs from the last call's, one store.
//
// "Thread-safe enough": the forced rung and the last rung are process-wide atomics, not
// per-thread. Two threads forcing different rungs of one layer at once get one or the other;
// `last` says what the last call on any thread ran. Each call reads the forced rung once, so a
// call never mixes two rungs.
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <vector>

#include <c10/core/DeviceType.h>

#include "check.h"

namespace labops::ladder {

// One rung: its name (what Python, the benchmark and the figure call it) and what it does.
struct Rung {
  const char* name;
  const char* what;
};

class Ladder {
 public:
  Ladder(const char* layer, const char* op, std::vector<Rung> cpu, std::vector<Rung> cuda)
      : layer_(layer), op_(op), cpu_(std::move(cpu)), cuda_(std::move(cuda)) {}
  Ladder(const Ladder&) = delete;
  Ladder& operator=(const Ladder&) = delete;

  const char* layer() const { return layer_; }
  const std::vector<Rung>& rungs(c10::DeviceType device) const {
    return device == c10::DeviceType::CUDA ? cuda_ : cpu_;
  }

  // The forced rung (1-based), 0 when the launcher picks.
  int forced() const { return forced_.load(std::memory_order_relaxed); }
  // Force `rung` (0: automatic); returns the rung forced before. A rung past both devices'
  // ladders is refused here; one past this device's ladder, or one that cannot take an input,
  // when a call meets it (run).
  int force(int64_t rung) {
    const size_t most = std::max(cpu_.size(), cuda_.size());
    LABOPS_CHECK(rung >= 0 && static_cast<size_t>(rung) <= most, "labops.ladder: layer '", layer_,
                 "' has rungs 1..", most, " (0: automatic), got rung ", rung);
    return forced_.exchange(static_cast<int>(rung), std::memory_order_relaxed);
  }
  // The rung the layer's last call ran (0: none yet).
  int last() const { return last_.load(std::memory_order_relaxed); }

  // The rung a call on `device` runs: `automatic` (the launcher's own choice) unless `forced`
  // (the entry's one read of forced()) names one. A forced rung must exist on `device`, and
  // why_not(rung), called only then, must return "" (else: why that rung cannot take this
  // input); otherwise ValueError naming the op, the layer and the rung. Never a fallback. `op`
  // names the op of this call where the ladder serves several (activation's tanh and gelu).
  template <typename WhyNot>
  int run(c10::DeviceType device, int forced, int automatic, WhyNot&& why_not, const char* op = nullptr) {
    if (op == nullptr) op = op_;
    int rung = automatic;
    if (forced != 0) {
      const std::vector<Rung>& here = rungs(device);
      const char* where = device == c10::DeviceType::CUDA ? "CUDA" : "CPU";
      LABOPS_CHECK(static_cast<size_t>(forced) <= here.size(), "labops.", op, ": layer '", layer_,
                   "' has no rung ", forced, " on ", where, " (rungs 1..", here.size(),
                   "); forced with labops.ladder.use");
      const std::string why = why_not(forced);
      LABOPS_CHECK(why.empty(), "labops.", op, ": layer '", layer_, "' rung ", forced, " (",
                   here[forced - 1].name, ") cannot take this input: ", why,
                   "; force another rung, or none (labops.ladder.use)");
      rung = forced;
    }
    if (last_.load(std::memory_order_relaxed) != rung) last_.store(rung, std::memory_order_relaxed);
    return rung;
  }

 private:
  const char* layer_;
  const char* op_;  // the op whose calls run the rungs, for messages
  std::vector<Rung> cpu_, cuda_;
  std::atomic<int> forced_{0}, last_{0};
};

// Every layer's ladder by layer name. Filled while the library loads (static initialisers run
// one at a time), read afterwards: no lock.
inline std::map<std::string, Ladder*>& registry() {
  static std::map<std::string, Ladder*> ladders;
  return ladders;
}

// A namespace-scope `const Registration r(forward_ladder());` in a layer's register.cpp (written by
// LABOPS_REGISTER_LAYER, register_layer.h) makes its ladder known to the ops of csrc/common/register.cpp.
struct Registration {
  explicit Registration(Ladder& ladder) { registry()[ladder.layer()] = &ladder; }
};

inline Ladder& find(const std::string& layer) {
  const auto it = registry().find(layer);
  if (it == registry().end()) {
    std::string known;
    for (const auto& entry : registry()) known += (known.empty() ? "" : ", ") + entry.first;
    LABOPS_CHECK(false, "labops.ladder: no layer '", layer, "' has a ladder; these do: ", known);
  }
  return *it->second;
}

}  // namespace labops::ladder
