/*
 * A fake NVIDIA driver for tests of harness.cuda.devices on hosts without a GPU.
 *
 * It answers the driver calls the device query makes, from the environment:
 *   FAKE_CUDA_DEVICES="NVIDIA H100 80GB HBM3:9.0;NVIDIA A100-SXM4-80GB:8.0"
 *   FAKE_CUDA_INIT_ERROR=999   (cuInit fails with that code)
 * and applies CUDA_VISIBLE_DEVICES the way the real driver does for numeric entries:
 * empty means no device, and the list stops at the first entry it cannot match.
 *
 * Build: gcc -shared -fPIC -o libcuda.so.1 fake_libcuda.c
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 16

static char names[MAX_DEVICES][128];
static int majors[MAX_DEVICES], minors[MAX_DEVICES], physical[MAX_DEVICES];
static int count = -1;

static void load(void)
{
    char all[MAX_DEVICES][128];
    int all_major[MAX_DEVICES], all_minor[MAX_DEVICES], total = 0;
    const char *spec = getenv("FAKE_CUDA_DEVICES");
    char buffer[4096];
    snprintf(buffer, sizeof buffer, "%s", spec ? spec : "");
    for (char *item = strtok(buffer, ";"); item && total < MAX_DEVICES; item = strtok(NULL, ";")) {
        char *colon = strrchr(item, ':');
        if (!colon) continue;
        *colon = '\0';
        snprintf(all[total], sizeof all[total], "%s", item);
        if (sscanf(colon + 1, "%d.%d", &all_major[total], &all_minor[total]) == 2) total++;
    }
    count = 0;
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (!visible) {
        for (int i = 0; i < total; i++) physical[count++] = i;
    } else {
        char list[1024];
        snprintf(list, sizeof list, "%s", visible);
        for (char *entry = strtok(list, ","); entry; entry = strtok(NULL, ",")) {
            char *end;
            long index = strtol(entry, &end, 10);
            if (end == entry || *end != '\0' || index < 0 || index >= total) break;
            physical[count++] = (int)index;
        }
    }
    for (int i = 0; i < count; i++) {
        snprintf(names[i], sizeof names[i], "%s", all[physical[i]]);
        majors[i] = all_major[physical[i]];
        minors[i] = all_minor[physical[i]];
    }
}

int cuInit(unsigned int flags)
{
    (void)flags;
    const char *error = getenv("FAKE_CUDA_INIT_ERROR");
    if (error) return atoi(error);
    load();
    return count == 0 ? 100 : 0;
}

int cuDriverGetVersion(int *version) { *version = 12080; return 0; }
int cuDeviceGetCount(int *out) { *out = count; return 0; }

int cuDeviceGet(int *device, int ordinal)
{
    if (ordinal < 0 || ordinal >= count) return 101; /* CUDA_ERROR_INVALID_DEVICE */
    *device = ordinal;
    return 0;
}

int cuDeviceGetName(char *name, int length, int device)
{
    snprintf(name, (size_t)length, "%s", names[device]);
    return 0;
}

int cuDeviceGetAttribute(int *value, int attribute, int device)
{
    if (attribute == 75) { *value = majors[device]; return 0; }
    if (attribute == 76) { *value = minors[device]; return 0; }
    return 1;
}

int cuDeviceGetUuid(unsigned char *uuid, int device)
{
    for (int i = 0; i < 16; i++) uuid[i] = (unsigned char)(physical[device] * 16 + i);
    return 0;
}

int cuDeviceTotalMem_v2(size_t *bytes, int device)
{
    *bytes = (size_t)(80 + physical[device]) << 30;
    return 0;
}

int cuGetErrorName(int error, const char **name)
{
    *name = error == 999 ? "CUDA_ERROR_UNKNOWN" : "CUDA_ERROR_OTHER";
    return 0;
}
