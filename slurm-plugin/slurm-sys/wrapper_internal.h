/* Order matters: config.h first, as in every Slurm source file. */
#include "config.h"
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/spank.h>
#include "src/common/bitstring.h"
#include "src/common/list.h"
#include "src/common/log.h"
#include "src/common/node_conf.h"
#include "src/common/job_resources.h"
#include "src/common/gres.h"
#include "src/common/select.h"
#include "src/common/xmalloc.h"
#include "src/slurmctld/slurmctld.h"
