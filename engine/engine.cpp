// placeholder so that strata_engine has a source until the engine lands.
namespace strata::engine {
int engine_placeholder() {
  return 0;
}
}  // namespace strata::engine
