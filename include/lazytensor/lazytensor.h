#pragma once
// The umbrella header: everything a user of lazytensor needs.
#include "lazytensor/device.h"
#include "lazytensor/dtype.h"
#include "lazytensor/error.h"
#include "lazytensor/metrics.h"
#include "lazytensor/models.h"
#include "lazytensor/optim.h"
#include "lazytensor/profiler.h"
#include "lazytensor/reference.h"
#include "lazytensor/runtime.h"
#include "lazytensor/shape.h"
#include "lazytensor/tensor.h"
