/*
 * A stand-in libcuda.so.1 for hosts without an NVIDIA driver.
 *
 * The official CUDA build of vLLM links its extension modules (vllm._C_stable_libtorch,
 * the flash-attention and MoE extensions) against libcuda.so.1, so without a driver
 * `import vllm.platforms.cuda` fails before any backend selection code can run. This
 * library only satisfies the dynamic linker: it exports the driver entry points those
 * modules import, and every one reports CUDA_ERROR_NO_DEVICE. Nothing may ever compute
 * with it; the selection lane runs no kernels.
 *
 * Build: gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o libcuda.so.1 libcuda_stub.c
 */

#define CUDA_ERROR_NO_DEVICE 100

static const char no_device[] = "dflash-matrix libcuda stub: no CUDA device (simulated platform)";

int cuCtxGetCurrent(void) { return CUDA_ERROR_NO_DEVICE; }
int cuCtxSetCurrent(void) { return CUDA_ERROR_NO_DEVICE; }
int cuDeviceGetAttribute(void) { return CUDA_ERROR_NO_DEVICE; }
int cuDevicePrimaryCtxRetain(void) { return CUDA_ERROR_NO_DEVICE; }
int cuDriverGetVersion(void) { return CUDA_ERROR_NO_DEVICE; }
int cuGetProcAddress_v2(void) { return CUDA_ERROR_NO_DEVICE; }
int cuMemAddressFree(void) { return CUDA_ERROR_NO_DEVICE; }
int cuMemAddressReserve(void) { return CUDA_ERROR_NO_DEVICE; }
int cuMemCreate(void) { return CUDA_ERROR_NO_DEVICE; }
int cuMemGetAllocationGranularity(void) { return CUDA_ERROR_NO_DEVICE; }
int cuMemMap(void) { return CUDA_ERROR_NO_DEVICE; }
int cuMemRelease(void) { return CUDA_ERROR_NO_DEVICE; }
int cuMemSetAccess(void) { return CUDA_ERROR_NO_DEVICE; }
int cuMemUnmap(void) { return CUDA_ERROR_NO_DEVICE; }
int cuPointerGetAttribute(void) { return CUDA_ERROR_NO_DEVICE; }
int cuTensorMapEncodeTiled(void) { return CUDA_ERROR_NO_DEVICE; }

/* Error strings are read back into log messages, so this one must succeed. */
int cuGetErrorString(int error, const char **text)
{
    (void)error;
    if (text) {
        *text = no_device;
    }
    return 0;
}

/* Marker the harness checks, so that a real driver is never mistaken for the stub. */
int dflash_matrix_libcuda_stub(void) { return 1; }
