// The ladder's ops (Note [the ladder], common/ladder.h): what labops/ladder.py reads and sets.
// Private (names start with _): they take no tensors, so they have no fake and no autograd.
#include <string>
#include <vector>

#include <torch/library.h>

#include "ladder.h"

namespace labops::ladder {
namespace {

c10::DeviceType device_of(const std::string& device) {
  LABOPS_CHECK(device == "cpu" || device == "cuda", "labops.ladder: device must be 'cpu' or 'cuda', got '",
               device, "'");
  return device == "cuda" ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
}

// Rung names (or, with `about`, what each does) of one layer on one device, rung 1 first.
std::vector<std::string> rung_fields(const std::string& layer, const std::string& device, bool about) {
  std::vector<std::string> out;
  for (const Rung& r : find(layer).rungs(device_of(device))) out.emplace_back(about ? r.what : r.name);
  return out;
}

std::vector<std::string> names(std::string layer, std::string device) { return rung_fields(layer, device, false); }
std::vector<std::string> about(std::string layer, std::string device) { return rung_fields(layer, device, true); }

std::vector<std::string> layers() {
  std::vector<std::string> out;
  for (const auto& entry : registry()) out.push_back(entry.first);
  return out;
}

int64_t force(std::string layer, int64_t rung) { return find(layer).force(rung); }
int64_t forced(std::string layer) { return find(layer).forced(); }
int64_t last(std::string layer) { return find(layer).last(); }

}  // namespace
}  // namespace labops::ladder

TORCH_LIBRARY_FRAGMENT(labops, m) {
  m.def("_ladder(str layer, str device) -> str[]", &labops::ladder::names);
  m.def("_ladder_about(str layer, str device) -> str[]", &labops::ladder::about);
  m.def("_ladder_layers() -> str[]", &labops::ladder::layers);
  m.def("_ladder_force(str layer, int rung) -> int", &labops::ladder::force);  // returns the rung forced before
  m.def("_ladder_forced(str layer) -> int", &labops::ladder::forced);
  m.def("_ladder_last(str layer) -> int", &labops::ladder::last);
}
