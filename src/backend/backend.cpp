#include "backend/backend.h"

#include <algorithm>

namespace lt::backend {

void commit_nothing(const ExecutionArgs& args, const std::vector<uint32_t>& output_launch,
                    size_t launches_begun, const Failure& failure,
                    const std::function<void(Buffer& dst, const Buffer& src, size_t bytes)>& copy) {
  for (size_t o = 0; o < args.outputs.size(); ++o) {
    const BufferPtr& output = args.outputs[o];
    const BufferPtr& before = o < args.rollback.size() ? args.rollback[o] : nullptr;
    if (before && !before->failed()) {
      if (before != output) {
        copy(*output, *before, std::min(output->bytes(), before->bytes()));
        continue;
      }
      if (launches_begun <= output_launch[o]) continue;
    }
    output->set_error(failure);
  }
}

}  // namespace lt::backend
