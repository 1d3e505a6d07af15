#pragma once

namespace lt::backend {

// For tests of failure handling: the next `count` executions fail on the device as a kernel
// error would, before writing anything.
void inject_execution_failures(int count);

}  // namespace lt::backend
