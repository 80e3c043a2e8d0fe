// generate_with_preference: worker::generate with a KvFill on the first step (preference.h).
#include "tessera/worker/preference.h"

namespace tessera::worker {

Result<PreferenceGenerateResult> generate_with_preference(Engine& engine, PreferenceGenerateRequest request) {
  GenerateRequest req = std::move(request.base);
  req.fill = std::move(request.fill);
  TS_ASSIGN_OR_RETURN(GenerateResult gen, generate(engine, req));
  PreferenceGenerateResult out;
  out.fill = gen.fill;
  out.gen = std::move(gen);
  return out;
}

}  // namespace tessera::worker
