// torch-xla's report, reproduced: `t.addcdiv_(t1, t2, value=0.1); mark_step()` in a loop.
// Under torch-xla 1.13 every such scalar became a synchronous upload. Here the counters of
// each scalar policy show what each design costs. Then the report's own shapes, which cannot
// work: the broadcast of (1,3), (3,1) and (1,3) is (3,3), and it cannot be written into (1,3).
#include <cstdio>

#include "lazytensor/lazytensor.h"

namespace {

void run(lt::ScalarPolicy policy) {
  lt::set_scalar_policy(policy);
  lt::Tensor t = lt::randn({3, 3}, 1);
  lt::Tensor t1 = lt::randn({3, 1}, 2);
  lt::Tensor t2 = lt::rand({1, 3}, 3).add_(1.0);
  lt::mark_step();
  lt::wait_device_ops();
  lt::metrics::reset();
  for (int step = 0; step < 10; ++step) {
    t.addcdiv_(t1, t2, 0.1);
    lt::mark_step();
  }
  lt::wait_device_ops();
  std::printf(
      "%-9s  sync uploads %3lld  async uploads %3lld  cache hits %3lld  misses %3lld  "
      "compiles %lld (+%lld cached)  t[0] = %.6f\n",
      lt::scalar_policy_name(policy),
      static_cast<long long>(lt::metrics::counter_value("TransferToDeviceSync")),
      static_cast<long long>(lt::metrics::counter_value("TransferToDeviceAsync")),
      static_cast<long long>(lt::metrics::counter_value("DeviceDataCacheHit")),
      static_cast<long long>(lt::metrics::counter_value("DeviceDataCacheMiss")),
      static_cast<long long>(lt::metrics::counter_value("UncachedCompile")),
      static_cast<long long>(lt::metrics::counter_value("CachedCompile")), t.to_vector()[0]);
}

}  // namespace

int main() {
  std::printf("10 x t(3,3).addcdiv_(t1(3,1), t2(1,3), value=0.1); mark_step()\n");
  for (lt::ScalarPolicy policy : {lt::ScalarPolicy::uncached, lt::ScalarPolicy::cached,
                                  lt::ScalarPolicy::constant, lt::ScalarPolicy::argument}) {
    run(policy);
  }
  lt::set_scalar_policy(lt::ScalarPolicy::argument);

  std::printf("\nThe report's shapes: t(1,3).addcdiv_(t1(3,1), t2(1,3), value=0.1)\n");
  lt::Tensor t = lt::from_vector(std::vector<float>{1, 2, 3}, {1, 3});
  lt::Tensor t1 = lt::ones({3, 1});
  lt::Tensor t2 = lt::ones({1, 3});
  try {
    t.addcdiv_(t1, t2, 0.1);
    std::printf("unexpected: no error\n");
    return 1;
  } catch (const lt::Error& e) {
    std::printf("lt::Error: %s\n", e.what());
  }
  const auto kept = t.to_vector();
  std::printf("t is unchanged: [%g, %g, %g]\n", kept[0], kept[1], kept[2]);
  return 0;
}
