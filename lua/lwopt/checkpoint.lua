-- checkpoint.lua: save and load training state, keyed by parameter name (never by rank), so a
-- checkpoint loads at another rank count or layout (resharding). A checkpoint is a directory:
--   model.safetensors         every parameter, f32, consolidated (any safetensors reader)
--   optim-rNNNNN.safetensors  rank N's optimizer state: tensors "m/<param>", "v/<param>", and
--                             metadata "<param>" = "muon|adamw <start> <count>" (element range)
--   manifest.json             format, step, ranks, layout, hyper-parameters, schedule, data and
--                             RNG position, parameter names and shapes, every file's size and
--                             CRC32C
-- Saving writes DIR/step-N.tmp/, fsyncs every file and the directory, renames it to
-- DIR/step-N/, then replaces DIR/latest atomically: a crash at any moment leaves the previous
-- checkpoint whole and `latest` pointing at it. All ranks agree that a save succeeded.
local ffi = require("ffi")
local C = require("lwopt.C")
local json = require("lwopt.json")
local safetensors = require("lwopt.safetensors")

local lib = C.lib
local checkpoint = {}

checkpoint.FORMAT = "lwopt-checkpoint"
checkpoint.VERSION = 1

local function fail(where, fmt, ...) error(where .. ": " .. fmt:format(...), 0) end

local function step_name(step) return ("step-%09d"):format(step) end
local function optim_name(rank) return ("optim-r%05d.safetensors"):format(rank) end

-- A test hook: LWOPT_CKPT_CRASH=<point> ends the job there as a kill would: MPI_Abort, not
-- os.exit, whose MPI_Finalize would leave the other ranks waiting in the next collective.
local function crash_point(point)
   if os.getenv("LWOPT_CKPT_CRASH") == point then
      io.stderr:write("checkpoint: crashing at '", point, "' (LWOPT_CKPT_CRASH)\n")
      require("lwopt.comm").init():abort(9)
   end
end

-- Every rank's (ok, message): all ranks learn whether any failed.
local function agree(comm, ok, message, where)
   local failures = comm:allreduce({ ok and 0 or 1 })[1]
   if failures > 0 then
      if ok then fail(where, "%d other rank(s) failed", failures) end
      error(message, 0)
   end
end

local function protect(fn)
   local ok, err = pcall(fn)
   return ok, (not ok) and tostring(err) or nil
end

local function shape_of(spec) return json.array(spec.shape) end

-- This rank's optimizer state as tensors and metadata pairs.
local function state_tensors(ddp, opt)
   local tensors, metadata = {}, {}
   local entry = ffi.new("lw_state_entry")
   for k = 0, lib.lw_optimizer_state_count(opt._c) - 1 do
      C.check(lib.lw_optimizer_state(opt._c, k, entry), "checkpoint.save")
      local name = ddp.specs[entry.param + 1].name
      local count = tonumber(entry.count)
      tensors[#tensors + 1] = { name = "m/" .. name, data = entry.m, count = count }
      if entry.v ~= nil then
         tensors[#tensors + 1] = { name = "v/" .. name, data = entry.v, count = count }
      end
      metadata[#metadata + 1] = { name, ("%s %d %d"):format(entry.muon and "muon" or "adamw",
         tonumber(entry.start), count) }
   end
   return tensors, metadata
end

-- Removes a checkpoint directory: its files, then itself (checkpoints hold no subdirectories).
local function remove_tree(dir)
   local p = io.popen('ls -1 "' .. dir .. '" 2>/dev/null')
   for name in p:lines() do os.remove(dir .. "/" .. name) end
   p:close()
   os.remove(dir)
end

-- Step directories in dir, oldest first.
local function list_steps(dir)
   local steps = {}
   local p = io.popen('ls -1 "' .. dir .. '" 2>/dev/null')
   for name in p:lines() do
      local n = name:match("^step%-(%d+)$")
      if n then steps[#steps + 1] = tonumber(n) end
   end
   p:close()
   table.sort(steps)
   return steps
end

-- checkpoint.save(dir, { ddp, opt, step, keep = 3, extra = { ... } }): collective; every rank
-- calls it. extra goes into the manifest (hyper-parameters, schedule, data and RNG position).
-- Returns the checkpoint's directory.
function checkpoint.save(dir, s)
   local where = "checkpoint.save"
   local ddp, opt, comm = s.ddp, s.opt, s.ddp.comm
   local final = dir .. "/" .. step_name(s.step)
   local tmp = final .. ".tmp"
   local ok, err = protect(function()
      if comm.rank == 0 then
         C.check(lib.lw_dir_make(dir), where)
         remove_tree(tmp)
         C.check(lib.lw_dir_make(tmp), where)
      end
   end)
   agree(comm, ok, err, where)
   ddp:finish_param_sync()

   local sizes, crcs = {}, {}
   for r = 1, comm.size do sizes[r], crcs[r] = 0, 0 end
   local model_bytes, model_crc = 0, 0
   -- the model on rank 0 (at ZeRO-3 gathered parameter by parameter, every rank taking part)
   local params
   ok, err = protect(function() params = ddp:params_on(0) end)
   agree(comm, ok, err, where)
   ok, err = protect(function()
      local tensors, metadata = state_tensors(ddp, opt)
      sizes[comm.rank + 1], crcs[comm.rank + 1] =
         safetensors.write(tmp .. "/" .. optim_name(comm.rank), tensors, metadata)
      crash_point("optim")
      if comm.rank == 0 then
         model_bytes, model_crc = safetensors.write(tmp .. "/model.safetensors", params,
            { { "format", checkpoint.FORMAT }, { "step", tostring(s.step) } })
         crash_point("model")
      end
   end)
   agree(comm, ok, err, where)
   -- every rank's size and checksum in one all-reduce: each rank fills only its own slots
   local both = {}
   for r = 1, comm.size do both[r], both[comm.size + r] = sizes[r], crcs[r] end
   both = comm:allreduce(both)
   for r = 1, comm.size do sizes[r], crcs[r] = both[r], both[comm.size + r] end

   ok, err = protect(function()
      if comm.rank ~= 0 then return end
      local files = json.array({ json.object({ name = "model.safetensors", bytes = model_bytes,
         crc32c = ("%08x"):format(model_crc) }) })
      for r = 1, comm.size do
         files[#files + 1] = json.object({ name = optim_name(r - 1), bytes = sizes[r],
            crc32c = ("%08x"):format(crcs[r]) })
      end
      local params = json.array()
      for _, spec in ipairs(ddp.specs) do
         params[#params + 1] = json.object({ name = spec.name, shape = shape_of(spec),
            optimizer = spec.optimizer })
      end
      local step, skips = ffi.new("int64_t[1]"), ffi.new("int64_t[1]")
      C.check(lib.lw_optimizer_counters(opt._c, step, skips), where)
      local layout = ddp.layout
      local manifest = json.object({
         format = checkpoint.FORMAT, version = checkpoint.VERSION, step = s.step,
         ranks = comm.size, mode = ddp.mode,
         layout = json.object({ algorithm = layout.algorithm, adamw_layout = layout.adamw_layout,
            bucket_size = layout.bucket_size or json.null, hash = layout:hash(), dp = layout.dp,
            expert_dp = layout.expert_dp, zero = ddp.zero, shard = ddp.shard }),
         optimizer = json.object({ updates = tonumber(step[0]), skips = tonumber(skips[0]) }),
         extra = json.object(s.extra or {}), params = params, files = files,
      })
      local text = json.encode(manifest, "  ") .. "\n"
      C.check(lib.lw_file_write(tmp .. "/manifest.json", text, #text, nil), where)
      crash_point("manifest")
      C.check(lib.lw_dir_sync(tmp), where)
      remove_tree(final)
      if not os.rename(tmp, final) then fail(where, "cannot rename %s to %s", tmp, final) end
      crash_point("rename")
      C.check(lib.lw_dir_sync(dir), where)
      local latest = step_name(s.step) .. "\n"
      C.check(lib.lw_file_write(dir .. "/latest.tmp", latest, #latest, nil), where)
      if not os.rename(dir .. "/latest.tmp", dir .. "/latest") then
         fail(where, "cannot update %s/latest", dir)
      end
      C.check(lib.lw_dir_sync(dir), where)
      local steps = list_steps(dir)
      for i = 1, #steps - (s.keep or 3) do remove_tree(dir .. "/" .. step_name(steps[i])) end
   end)
   agree(comm, ok, err, where)
   return final
end

-- The checkpoint directory `latest` names in dir; nil when there is none.
function checkpoint.latest(dir)
   local f = io.open(dir .. "/latest")
   if f == nil then return nil end
   local name = f:read("*l")
   f:close()
   if name == nil or not name:match("^step%-%d+$") then
      error("checkpoint: " .. dir .. "/latest does not name a checkpoint", 0)
   end
   return dir .. "/" .. name
end

-- Reads and checks manifest.json and the files' sizes and checksums.
function checkpoint.read_manifest(path)
   local where = "checkpoint.load"
   local f = io.open(path .. "/manifest.json", "rb")
   if f == nil then fail(where, "%s is not a checkpoint (no manifest.json)", path) end
   local text = f:read("*a")
   f:close()
   local ok, m = pcall(json.decode, text)
   if not ok then fail(where, "%s/manifest.json: %s", path, m) end
   if type(m) ~= "table" or m.format ~= checkpoint.FORMAT then
      fail(where, "%s/manifest.json is not an lwopt checkpoint manifest", path)
   end
   if m.version ~= checkpoint.VERSION then
      fail(where, "%s has format version %s; this lwopt reads version %d", path,
         tostring(m.version), checkpoint.VERSION)
   end
   if type(m.files) ~= "table" or type(m.params) ~= "table" or type(m.step) ~= "number" then
      fail(where, "%s/manifest.json lacks files, params or step", path)
   end
   local bytes, crc = ffi.new("int64_t[1]"), ffi.new("uint32_t[1]")
   for _, file in ipairs(m.files) do
      local full = path .. "/" .. tostring(file.name)
      if lib.lw_file_checksum(full, bytes, crc) ~= 0 then
         fail(where, "%s: missing or unreadable (%s)", full, C.last_error())
      end
      if tonumber(bytes[0]) ~= file.bytes then
         fail(where, "%s has %d bytes, the manifest says %s (truncated?)", full,
            tonumber(bytes[0]), tostring(file.bytes))
      end
      if ("%08x"):format(tonumber(crc[0])) ~= file.crc32c then
         fail(where, "%s fails its checksum (CRC32C %08x, the manifest says %s): corrupted",
            full, tonumber(crc[0]), tostring(file.crc32c))
      end
   end
   return m
end

local function open_st(path)
   local out = ffi.new("lw_safetensors*[1]")
   C.check(lib.lw_safetensors_open(path, out), "checkpoint.load")
   return ffi.gc(out[0], lib.lw_safetensors_free)
end

local function find(st, name)
   local i = ffi.new("int32_t[1]")
   if lib.lw_safetensors_find(st, name, i) ~= 0 then return nil end
   local view = ffi.new("lw_tensor_view")
   C.check(lib.lw_safetensors_tensor(st, i[0], view), "checkpoint.load")
   return view
end

-- Checks the parameters of the checkpoint at path against ddp's model; returns the open file.
local function check_params(path, ddp, m)
   local where = "checkpoint.load"
   local by_name = {}
   for _, p in ipairs(m.params) do by_name[p.name] = p end
   for _, spec in ipairs(ddp.specs) do
      local p = by_name[spec.name]
      if p == nil then fail(where, "%s has no parameter '%s': another model?", path, spec.name) end
      local same = #p.shape == #spec.shape
      for d = 1, #spec.shape do same = same and p.shape[d] == spec.shape[d] end
      if not same then
         fail(where, "'%s' has shape {%s} in %s but {%s} in the model", spec.name,
            table.concat(p.shape, ", "), path, table.concat(spec.shape, ", "))
      end
   end
   if #m.params ~= #ddp.specs then
      fail(where, "%s has %d parameters, the model %d: another model?", path, #m.params,
         #ddp.specs)
   end
   local st = open_st(path .. "/model.safetensors")
   for _, spec in ipairs(ddp.specs) do
      local view = find(st, spec.name)
      local numel = 1
      for _, d in ipairs(spec.shape) do numel = numel * d end
      if view == nil or ffi.string(view.dtype) ~= "F32" or tonumber(view.bytes) ~= 4 * numel then
         fail(where, "%s/model.safetensors: '%s' is missing or has the wrong size", path, spec.name)
      end
   end
   return st
end

-- Writes the checked parameters into ddp: collective at ZeRO-3, so it runs only once every rank
-- has agreed that its checks passed.
local function write_params(st, ddp)
   for _, spec in ipairs(ddp.specs) do
      local view = find(st, spec.name)
      ddp:with_param(spec.name, function(target)
         ffi.copy(target.data, view.data, 4 * target.numel)
      end)
   end
end

-- Loads this rank's optimizer state: Muon momentum of each matrix it owns now, and AdamW m, v of
-- its element ranges, intersected with the ranges every saved rank held (resharding).
local function load_state(path, ddp, opt, m)
   local where = "checkpoint.load"
   local files = {}
   for r = 0, m.ranks - 1 do files[r + 1] = open_st(path .. "/" .. optim_name(r)) end
   local entry = ffi.new("lw_state_entry")
   for k = 0, lib.lw_optimizer_state_count(opt._c) - 1 do
      C.check(lib.lw_optimizer_state(opt._c, k, entry), where)
      local name = ddp.specs[entry.param + 1].name
      local start, count = tonumber(entry.start), tonumber(entry.count)
      local kind = entry.muon and "muon" or "adamw"
      local covered = 0
      for _, st in ipairs(files) do
         local meta = lib.lw_safetensors_metadata(st, name)
         if meta ~= nil then
            local saved_kind, s0, c0 = ffi.string(meta):match("^(%a+) (%d+) (%d+)$")
            s0, c0 = tonumber(s0), tonumber(c0)
            if saved_kind ~= kind then
               fail(where, "'%s' was optimized by %s in %s, by %s now", name, tostring(saved_kind),
                  path, kind)
            end
            local lo, hi = math.max(start, s0), math.min(start + count, s0 + c0)
            if hi > lo then
               local mv, vv = find(st, "m/" .. name), find(st, "v/" .. name)
               if mv == nil or (kind == "adamw" and vv == nil) then
                  fail(where, "%s lacks the state tensors of '%s'", path, name)
               end
               ffi.copy(entry.m + (lo - start), ffi.cast("const float *", mv.data) + (lo - s0),
                  4 * (hi - lo))
               if kind == "adamw" then
                  ffi.copy(entry.v + (lo - start), ffi.cast("const float *", vv.data) + (lo - s0),
                     4 * (hi - lo))
               end
               covered = covered + (hi - lo)
            end
         end
      end
      if covered ~= count then
         fail(where, "%s holds state for %d of the %d elements of '%s' this rank needs", path,
            covered, count, name)
      end
   end
   C.check(lib.lw_optimizer_set_counters(opt._c, m.optimizer.updates, m.optimizer.skips), where)
end

-- checkpoint.load(path, { ddp, opt = nil | optimizer, weights_only = false }): collective.
-- Restores parameters and (unless weights_only or no opt) the optimizer state, resharding to
-- this run's ranks and layout. Returns the manifest (step, extra).
function checkpoint.load(path, s)
   local comm = s.ddp.comm
   local m, st
   local ok, err = protect(function()
      m = checkpoint.read_manifest(path)
      st = check_params(path, s.ddp, m)
      if s.opt and not s.weights_only then load_state(path, s.ddp, s.opt, m) end
   end)
   agree(comm, ok, err, "checkpoint.load")
   write_params(st, s.ddp)
   s.ddp:broadcast_params(0) -- the same on every rank, byte for byte
   return m
end

return checkpoint
