#include <stdint.h>
#include <stdbool.h>
#include <time.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/spank.h>
