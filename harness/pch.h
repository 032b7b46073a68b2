// Precompiled header for the harness: the LibTorch headers every translation unit uses. Narrow on purpose
// (ATen, not torch/torch.h): the C++ frontend's nn/optim/serialize are not used.
#pragma once
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>
