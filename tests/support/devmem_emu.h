/* tests/support/devmem_emu.h - the emulated device-memory backend (tests only). */
#ifndef MC_TEST_DEVMEM_EMU_H
#define MC_TEST_DEVMEM_EMU_H

#include <stdint.h>

#include "mem/devmem.h"

/* Install with mc_devmem_set_backend(&mc_devmem_emu_ops) before any engine. */
extern const struct mc_devmem_ops mc_devmem_emu_ops;
/* Asynchronous copies started so far (each staged chunk makes one). */
uint64_t mc_devmem_emu_async_copies(void);

#endif
