/* Order matters: config.h first, as in every Slurm source file. */
#include "config.h"
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/slurm_version.h>
#include <slurm/spank.h>
#include "src/common/bitstring.h"
#include "src/common/list.h"
#include "src/common/log.h"
#include "src/common/node_conf.h"
#include "src/common/job_resources.h"
#include "src/common/xmalloc.h"
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0)
/* 23.02 moved the plugin interfaces to src/interfaces. */
#include "src/interfaces/gres.h"
#include "src/interfaces/select.h"
#else
#include "src/common/gres.h"
#include "src/common/select.h"
#endif
#include "src/slurmctld/slurmctld.h"
