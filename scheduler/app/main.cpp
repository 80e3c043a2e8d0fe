// tessera-scheduler: process entry point (skeleton; the service is being written).
#include <cstdio>

int main() {
  std::fprintf(stderr, "tessera-scheduler: not implemented yet: scheduler service\n");
  return 1;
}
