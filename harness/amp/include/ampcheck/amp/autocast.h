// AutocastGuard — RAII for LibTorch's autocast state on one device type, the C++ twin of Python's
// `with torch.autocast(device_type, dtype):`. Restores the previous enabled flag and dtype on exit and, like
// Python's __exit__, clears the autocast weight-cast cache when the outermost autocast region ends.
#pragma once

#include <ATen/autocast_mode.h>

namespace ampcheck::amp {

class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool enabled = true)
      : device_(device),
        prev_enabled_(at::autocast::is_autocast_enabled(device)),
        prev_dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_enabled(device_, enabled);
    at::autocast::set_autocast_dtype(device_, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, prev_enabled_);
    at::autocast::set_autocast_dtype(device_, prev_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool prev_enabled_;
  c10::ScalarType prev_dtype_;
};

// The dtype an autocast-listed op (a matmul) computes in on this device type right now: autocast's dtype where
// autocast is on, else `fallback` (the operands' own dtype).
inline c10::ScalarType autocast_dtype_or(c10::DeviceType device, c10::ScalarType fallback) {
  return at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device) : fallback;
}

}  // namespace ampcheck::amp
