#include <lazytensor/lazytensor.h>

#include <cstdio>

int main() {
  lt::Tensor t = lt::ones({4}).mul(3.0).add(1.0);
  lt::mark_step();
  const float value = t.to_vector()[0];
  std::printf("%g\n", value);
  return value == 4.0f ? 0 : 1;
}
