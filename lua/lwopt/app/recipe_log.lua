-- recipe_log.lua: the configuration record that opens the --log of recipes/gpt_small.lua
-- (beside recipe.lua): every flag's value as the run uses it (presets and defaults filled
-- in), lwopt's version and commit, the ranks with each one's host and device, the start time
-- and the host. The step records that follow are lw.train's; docs/recipes.md describes both.
local ffi = require("ffi")
local C = require("lwopt.C")
local json = require("lwopt.json")
local files = require("lwopt.files")
local recipe_batch = require("lwopt.app.recipe_batch")

local lib = C.lib
local recipe_log = {}

-- The log format's version, written in the configuration record: raised when a field changes
-- meaning or goes away (new fields keep it).
recipe_log.FORMAT = 1

-- Text of a command's standard output with trailing white space removed; nil when it fails or
-- says nothing.
local function command_output(command)
   local pipe = io.popen(command .. " 2>/dev/null")
   if pipe == nil then return nil end
   local text = pipe:read("*a") or ""
   pipe:close()
   text = text:gsub("%s+$", "")
   return text ~= "" and text or nil
end

-- This machine's name (the kernel's), or nil when it cannot be told.
function recipe_log.host_name()
   local f = io.open("/proc/sys/kernel/hostname", "r")
   if f then
      local name = (f:read("*l") or ""):gsub("%s+$", "")
      f:close()
      if name ~= "" then return name end
   end
   return command_output("hostname") or os.getenv("HOSTNAME")
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- The directory lwopt's Lua modules were loaded from, two levels up from lwopt/ (the source
-- tree in a checkout: lua/lwopt/app/ -> .), or nil when this file's path is not known.
local function source_root()
   local source = debug.getinfo(1, "S").source
   local file = source:match("^@(.*)$")
   if file == nil then return nil end
   local dir = file:match("^(.*)/lwopt/app/[^/]*$")
   if dir == nil then return nil end
   return dir:match("^(.*)/[^/]*$") or "."
end

-- lwopt's git commit: the build's when it records one (the generated binding's `commit`), else
-- `git rev-parse HEAD` of the source tree the modules were loaded from when that is a git
-- checkout (its top holds .git), else nil. Never an error.
function recipe_log.commit()
   local found, generated = pcall(require, "lwopt.cdef")
   if found and type(generated) == "table" and type(generated.commit) == "string"
      and generated.commit ~= "" then
      return generated.commit
   end
   local root = source_root()
   if root == nil then return nil end
   local looked, kind = pcall(files.kind, root .. "/.git")
   if not looked or kind == "missing" then return nil end
   local commit = command_output("git -C " .. shell_quote(root) .. " rev-parse HEAD")
   return commit and commit:match("^%x+$") and commit or nil
end

-- Seconds since the Unix epoch as ISO 8601 UTC to the millisecond: "2025-01-31T09:05:07.250Z".
function recipe_log.iso_time(seconds)
   local whole = math.floor(seconds)
   local ms = math.min(999, math.floor((seconds - whole) * 1000 + 0.5))
   return os.date("!%Y-%m-%dT%H:%M:%S", whole) .. (".%03dZ"):format(ms)
end

-- Every rank's host and device, gathered on rank 0 (collective: one all-to-all over comm):
-- a list { { rank = 0, host, device = "cuda:0" (lw_device_name), name = "NVIDIA H100 80GB HBM3"
-- (lw_device_get_info's) }, ... } on rank 0, nil on the others. device: the rank's lw_device*.
function recipe_log.devices(comm, device)
   local info = ffi.new("lw_device_info")
   local name = lib.lw_device_get_info(device, info) == 0 and ffi.string(info.name) or ""
   local mine = table.concat({ recipe_log.host_name() or "", ffi.string(lib.lw_device_name(device)),
      name }, "\n")
   local parts = {}
   for j = 1, comm.size do parts[j] = {} end
   parts[1] = { mine:byte(1, -1) }
   comm:set_label("every rank's host and device, for the log")
   local got = comm:alltoallv(parts)
   if comm.rank ~= 0 then return nil end
   local list = json.array()
   for r = 1, comm.size do
      local text = string.char(unpack(got[r]))
      local host, dev, dev_name = text:match("^(.-)\n(.-)\n(.*)$")
      list[r] = json.object({ rank = r - 1, host = host ~= "" and host or json.null,
         device = dev, name = dev_name })
   end
   return list
end

-- The value the run uses for each flag that the recipe resolves later than flags.parse: the
-- data's path, the validation files found, the default prompt, the watchdog's timeout, the
-- dense MLP's width, Muon's defaults and the global batch.
local function resolved(run, v, data, path)
   local muon = lib.lw_muon_defaults()
   local dp = (run.dp_comm or run.comm).size
   return {
      data = path,
      val_data = v.val_data or data.val_path,
      prompt = v.prompt or (data.kind ~= "tokens" and "And God said" or nil),
      timeout = run.comm:timeout(),
      mlp_hidden = v.n_expert == 0 and (v.mlp_hidden or 4 * v.n_embd) or nil,
      muon_precision = v.muon_precision or C.name("ns_precision", muon.precision),
      muon_tp_mode = v.muon_tp_mode or C.name("muon_tp_mode", muon.tp_mode),
      global_batch = recipe_batch.global(v, dp),
   }
end

local function copy(t)
   local out = {}
   for k, x in pairs(t) do out[k] = x end
   return out
end

-- The configuration record (kind "config") of a run of the recipe, for lw.train's log_config:
-- run (recipe.lua's, built and resumed), v (the flags' values, checked), data and path (the
-- training data and its path), list (the recipe's flags), started (lw_wall_clock when the run
-- began), parameters (the whole model's parameter count). Collective (the ranks' devices);
-- every rank gets the record, only rank 0's lists the devices.
function recipe_log.config(run, v, data, path, list, started, parameters)
   local comm = run.comm
   local devices = recipe_log.devices(comm, run.ddp.device)
   local late = resolved(run, v, data, path)
   local flag_values = json.object()
   for _, f in ipairs(list) do
      local key = f[1]:gsub("-", "_")
      if key ~= "help" then
         local value = late[key]
         if value == nil then value = v[key] end
         flag_values[f[1]] = value == nil and json.null or value
      end
   end
   local ck = run.checkpoint
   local dp = (run.dp_comm or run.comm).size
   local global_batch = recipe_batch.global(v, dp)
   return {
      kind = "config", format = recipe_log.FORMAT,
      lwopt_version = ffi.string(lib.lw_version()), commit = recipe_log.commit() or json.null,
      start_time = recipe_log.iso_time(started), start_wall_time = started,
      host = recipe_log.host_name() or json.null,
      ranks = comm.size, dp = dp, tp = v.tp, ep = v.ep, devices = devices or json.array(),
      flags = flag_values,
      model = json.object({ n_layer = v.n_layer, n_embd = v.n_embd, n_head = v.n_head,
         vocab = v.vocab, vocab_rows = v.vocab_rows, parameters = parameters }),
      unit = data.kind == "tokens" and "token" or "byte",
      global_batch = global_batch, tokens_per_step = global_batch * v.seq,
      schedule = json.object(run.schedule and copy(run.schedule) or {}),
      start_step = run.start_step or 1,
      resumed_from = ck and ck.resumed_from or json.null,
      run_id = ck and ck.run_id or json.null,
   }
end

return recipe_log
