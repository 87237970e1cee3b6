// The strata_cuda library of a build without CUDA (STRATA_CUDA=OFF or no nvcc): no device, and
// every entry point that would need one throws Error(kUnsupported). Lets CPU code call the plain
// cuda/ headers without #ifdefs.
#include "cuda/blaslt.h"
#include "cuda/dense.h"
#include "cuda/dequant.h"
#include "cuda/grouped.h"
#include "cuda/runtime.h"
#include "cuda/vram_store.h"
#include "io/check.h"

namespace strata::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  fail(ErrorKind::kUnsupported, "{}: this strata was built without CUDA (STRATA_CUDA=OFF)", what);
}

}  // namespace

int cuda_device_count() {
  return 0;
}
std::string cuda_describe() {
  return "CUDA: not built (STRATA_CUDA=OFF or no nvcc)";
}
void cuda_synchronize() {}
CopyBandwidth probe_copy_bandwidth(int, size_t, int) {
  no_cuda("probe_copy_bandwidth");
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) no_cuda("DeviceBuffer");
}
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) no_cuda("PinnedBuffer");
}
PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

void set_device(int) {
  no_cuda("set_device");
}
DeviceMemory device_memory(int) {
  return DeviceMemory{};
}

Stream::Stream() {
  no_cuda("Stream");
}
Stream::~Stream() = default;
void Stream::synchronize() {}

void copy_to_device(void*, const void*, size_t bytes) {
  if (bytes > 0) no_cuda("copy_to_device");
}
void copy_to_host(void*, const void*, size_t bytes) {
  if (bytes > 0) no_cuda("copy_to_host");
}

bool cuda_dequantize_supported(GgmlType) {
  return false;
}
void cuda_dequantize(GgmlType, const void*, float*, int64_t, void*) {
  no_cuda("cuda_dequantize");
}
void cuda_dequantize_emulated(GgmlType, const void*, float*, int64_t) {
  no_cuda("cuda_dequantize_emulated");
}

BlasLt::BlasLt(size_t) {
  no_cuda("BlasLt");
}
BlasLt::~BlasLt() = default;
void BlasLt::matmul_f32(const float*, const float*, float*, int64_t, int64_t, int64_t, void*) {
  no_cuda("BlasLt::matmul_f32");
}

struct GroupedExperts::Impl {
  GroupedLimits lim;
};
GroupedExperts::GroupedExperts(const GroupedLimits&) {
  no_cuda("GroupedExperts");
}
GroupedExperts::~GroupedExperts() = default;
const GroupedLimits& GroupedExperts::limits() const {
  return impl_->lim;
}
float* GroupedExperts::x_host() {
  return nullptr;
}
const float* GroupedExperts::y_host() const {
  return nullptr;
}
void GroupedExperts::launch(const GroupedLayer&, void*) {
  no_cuda("GroupedExperts::launch");
}
void GroupedExperts::launch_device(const GroupedLayer&, const float*, const int32_t*, float*, void*,
                                   Stages) {
  no_cuda("GroupedExperts::launch_device");
}
void GroupedExperts::wait() {}
double GroupedExperts::last_seconds() const {
  return 0;
}

void cuda_portable_eval(PortableFn, const float*, float*, int64_t) {
  no_cuda("cuda_portable_eval");
}

struct VramStore::Device {};
VramStore::VramStore(int device, uint64_t, size_t) : device_(device) {
  no_cuda("VramStore");
}
VramStore::~VramStore() = default;
int32_t VramStore::put(const HostExpert&) {
  no_cuda("VramStore::put");
}
void VramStore::sync() {}
void VramStore::release(int32_t) {}
ExpertWeights VramStore::weights(int32_t) const {
  no_cuda("VramStore::weights");
}
uint64_t VramStore::largest_free() const {
  return 0;
}

std::unique_ptr<detail::DenseDevice> detail::DenseDevice::create(int, int64_t, int64_t) {
  no_cuda("CUDA_DENSE");
}

}  // namespace strata::cuda
