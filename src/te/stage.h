/*
 * te/stage.h - the initiator side of device memory: requests whose local
 * buffer is device memory move through pinned bounce buffers (internal).
 */
#ifndef MC_TE_STAGE_H
#define MC_TE_STAGE_H

#include "te/engine.h"

struct mc_peer;

/* Needs te->devmem; the thread starts here, pinned memory comes at first use. */
mc_status mc_stager_open(struct mc_te *te, struct mc_stager **out);
/* From now on no chunk is handed to a transport (they fail with
 * MC_ERR_SHUTDOWN); returns once no hand-over is in progress.  Called
 * before the transports close. */
void mc_stager_quiesce(struct mc_stager *sg);
/* After the transports closed: finishes every request, stops the thread. */
void mc_stager_close(struct mc_stager *sg);
/*
 * Take over task t, whose local buffer r->source is memory of device dev:
 * its bytes move chunk by chunk between the device and bounce buffers, and
 * between bounce buffers and the target through peer's transport.
 * t must be set up with one slice, t->first (len = r->length), which is
 * completed when every chunk has (or one failed and the others ended).
 */
void mc_stager_submit(struct mc_stager *sg, struct mc_task *t, struct mc_peer *peer,
		      const struct mc_xfer_req *r, int dev);
#endif
