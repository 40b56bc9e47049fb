-- job_submit/lua for compass: copies the --min-runtime / --resumable[=COST]
-- values that the compass SPANK plugin stored with the job (spank_job_env:
-- COMPASS_MIN_RUNTIME=<seconds>, COMPASS_RESUMABLE=0|1, and
-- COMPASS_MIGRATION_COST=<seconds> when the job names its cost) into
-- AdminComment as "compass:min_runtime=<s>,resumable=<0|1>[,migration_cost=<s>]",
-- the only place the public API
-- (slurm_load_jobs, scontrol show job) shows them. Install next to slurm.conf
-- as job_submit.lua and set JobSubmitPlugins=lua.
--
-- The SPANK plugin checks --min-runtime against the site cap on the submit
-- host, but a user can load their own plugstack.conf and compass.conf there
-- (or a plugin of their own) and send any value. So this script checks again
-- in slurmctld, with the compass.conf slurmctld reads (as the select plugin:
-- $COMPASS_CONF, else /etc/slurm/compass.conf), read once when slurmctld
-- loads this script: at its start, and whenever this file changes (Slurm
-- reloads it then; after changing the cap, `touch job_submit.lua`), not at
-- each submission under slurmctld's locks. A job above spank.max_min_runtime is refused, not
-- clamped: the user asked for protection the site does not give, and a
-- silently shortened protection would be a surprise at preemption time
-- (and the select plugin reads the job's spank_job_env, not this tag, so a
-- clamp here would not reach it). So are values the SPANK plugin never writes (not whole seconds, a resumable
-- flag other than 0/1, which could smuggle another key into the tag). A
-- missing compass.conf means the default cap (8h); a key this reader cannot
-- read (it knows `max_min_runtime = "..."` under [spank], as etc/compass.conf
-- writes it) refuses protected time, as the SPANK plugin does with a file it
-- cannot use; jobs without it are never refused.

local DEFAULT_CONF = "/etc/slurm/compass.conf"
local DEFAULT_CAP = 8 * 3600

-- compass's duration forms (compass_core::duration::parse) in whole
-- seconds, or nil: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or N with s/m/h/d.
local function duration(value)
	local v = string.match(value, "^%s*(.-)%s*$")
	if v == "" then
		return nil
	end
	if string.match(v, "%a$") then
		local n, unit = string.match(v, "^(%d+)(%a)$")
		local mult = ({ s = 1, m = 60, h = 3600, d = 86400 })[string.lower(unit or "")]
		if n == nil or mult == nil then
			return nil
		end
		return tonumber(n) * mult
	end
	local days, rest = string.match(v, "^(%d*)%-(.*)$")
	if days == nil then
		rest = v
	elseif days == "" then
		return nil
	end
	local f = {}
	for part in string.gmatch(rest .. ":", "([^:]*):") do
		if not string.match(part, "^%d+$") then
			return nil
		end
		f[#f + 1] = tonumber(part)
	end
	local h, m, s
	if days == nil then
		if #f == 1 then
			return f[1] * 60
		elseif #f == 2 then
			h, m, s = 0, f[1], f[2]
			if s >= 60 then
				return nil
			end
			return m * 60 + s
		elseif #f == 3 then
			h, m, s = f[1], f[2], f[3]
		else
			return nil
		end
	else
		if #f > 3 then
			return nil
		end
		h, m, s = f[1], f[2] or 0, f[3] or 0
	end
	if m >= 60 or s >= 60 then
		return nil
	end
	return (tonumber(days) or 0) * 86400 + h * 3600 + m * 60 + s
end

-- Slurm's way of printing a duration: [D-]H:MM:SS.
local function format(secs)
	local d = math.floor(secs / 86400)
	local r = secs - d * 86400
	local h, m, s = math.floor(r / 3600), math.floor(r % 3600 / 60), r % 60
	if d > 0 then
		return string.format("%d-%02d:%02d:%02d", d, h, m, s)
	end
	return string.format("%d:%02d:%02d", h, m, s)
end

-- spank.max_min_runtime in seconds and the file it came from, or nil, the
-- file and why it cannot be read.
local function site_cap()
	local path = os.getenv("COMPASS_CONF") or DEFAULT_CONF
	local f, err, code = io.open(path, "r")
	if f == nil then
		if code == 2 then -- ENOENT: no file, every default
			return DEFAULT_CAP, path
		end
		return nil, path, err
	end
	local section, cap
	for line in f:lines() do
		local l = string.match(line, "^%s*(.-)%s*$")
		local header = string.match(l, "^%[%s*([%w_%-]+)%s*%]")
		if header ~= nil then
			section = header
		elseif string.sub(l, 1, 1) ~= "#" and string.find(l, "max_min_runtime", 1, true) then
			local v, after = string.match(l, '^max_min_runtime%s*=%s*"([^"]*)"%s*(.*)$')
			if v == nil then
				v, after = string.match(l, "^max_min_runtime%s*=%s*'([^']*)'%s*(.*)$")
			end
			if section ~= "spank" or v == nil or (after ~= "" and string.sub(after, 1, 1) ~= "#") then
				f:close()
				return nil, path, "max_min_runtime is not written as `max_min_runtime = \"DURATION\"` under [spank]: `" .. l .. "`"
			end
			if cap ~= nil then
				f:close()
				return nil, path, "spank.max_min_runtime given twice"
			end
			cap = duration(v)
			if cap == nil then
				f:close()
				return nil, path, "spank.max_min_runtime: invalid duration `" .. v .. "`"
			end
		end
	end
	f:close()
	return cap or DEFAULT_CAP, path
end

-- Read when the script is loaded, not at each submission.
local SITE_CAP, SITE_CONF, SITE_WHY = site_cap()

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
	if (min ~= nil and not string.match(min, "^%d+$")) or (res ~= nil and res ~= "0" and res ~= "1") then
		slurm.log_info("compass: job_submit.lua: refused a job of uid %s with COMPASS_MIN_RUNTIME=%s COMPASS_RESUMABLE=%s",
			tostring(submit_uid), tostring(min), tostring(res))
		slurm.log_user("compass: --min-runtime / --resumable values not written by the compass SPANK plugin; submit with the site's plugstack.conf")
		return slurm.ERROR
	end
	if min ~= nil and tonumber(min) > 0 then
		local cap, path, why = SITE_CAP, SITE_CONF, SITE_WHY
		if cap == nil then
			slurm.log_error("compass: job_submit.lua: %s: %s; jobs with --min-runtime are refused", path, why)
			slurm.log_user("compass: --min-runtime cannot be used: the site config is unusable (%s: %s); submit without it or ask your administrator", path, why)
			return slurm.ERROR
		end
		if tonumber(min) > cap then
			slurm.log_user("compass: --min-runtime=%s exceeds the site cap of %s (spank.max_min_runtime in %s); ask for less",
				format(tonumber(min)), format(cap), path)
			return slurm.ERROR
		end
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
