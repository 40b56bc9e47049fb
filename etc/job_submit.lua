-- job_submit/lua for compass: copies the --min-runtime / --resumable[=COST]
-- values that the compass SPANK plugin stored with the job (spank_job_env:
-- COMPASS_MIN_RUNTIME=<seconds>, COMPASS_RESUMABLE=0|1, and
-- COMPASS_MIGRATION_COST=<seconds> when the job names its cost) into
-- AdminComment as "compass:min_runtime=<s>,resumable=<0|1>[,migration_cost=<s>]",
-- the only place the public API
-- (slurm_load_jobs, scontrol show job) shows them. Install next to slurm.conf
-- as job_submit.lua and set JobSubmitPlugins=lua.

function slurm_job_submit(job_desc, part_list, submit_uid)
	local env = job_desc.spank_job_env
	if env == nil then
		return slurm.SUCCESS
	end
	local min, res, cost
	for _, kv in pairs(env) do
		local k, v = string.match(kv, "^([%w_]+)=(.*)$")
		if k == "COMPASS_MIN_RUNTIME" then min = v end
		if k == "COMPASS_RESUMABLE" then res = v end
		if k == "COMPASS_MIGRATION_COST" then cost = v end
	end
	if min == nil and res == nil then
		return slurm.SUCCESS
	end
	local tag = string.format("compass:min_runtime=%s,resumable=%s", min or "0", res or "0")
	if cost ~= nil and string.match(cost, "^%d+$") then
		tag = tag .. ",migration_cost=" .. cost
	end
	local old = job_desc.admin_comment
	if old == nil or old == "" then
		job_desc.admin_comment = tag
	else
		job_desc.admin_comment = old .. ";" .. tag
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

return slurm.SUCCESS
