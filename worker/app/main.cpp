// tessera-worker: process entry point (skeleton; the service is being written).
#include <cstdio>

int main() {
  std::fprintf(stderr, "tessera-worker: not implemented yet: worker service\n");
  return 1;
}
