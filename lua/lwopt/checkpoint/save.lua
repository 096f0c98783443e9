-- checkpoint/save.lua: how lw.checkpoint.save writes a checkpoint (the format: init.lua):
-- every rank its optimizer file and rank 0 the model into DIR/step-N.tmp/, the ranks agreeing
-- after each step that it succeeded everywhere; then rank 0 writes the sealed manifest, makes the
-- directory durable, renames it to DIR/step-N/, replaces `latest` and prunes the run's older
-- checkpoints. Apart from init.lua, which lists, finds, checks and loads checkpoints: this
-- is the one writer. ck (from checkpoint.save): module (lw.checkpoint: FORMAT, VERSION, list,
-- on_point, read when used), seal and protect (init.lua's).
local ffi = require("ffi")
local C = require("lwopt.C")
local json = require("lwopt.json")
local files = require("lwopt.files")
local safetensors = require("lwopt.safetensors")
local ep = require("lwopt.ep")
local tp = require("lwopt.tp")
local state = require("lwopt.checkpoint.state")
local errors = require("lwopt.errors")

local lib = C.lib
local saver = {}

local function step_name(step) return ("step-%09d"):format(step) end
local optim_name = state.file_name

-- The hooks at a point of the protocol (checkpoint.on_point, init.lua): the save's own,
-- then the one for every save.
local function reached(job, point)
   if job.s.on_point then job.s.on_point(point, job.s) end
   local checkpoint = job.ck.module
   if checkpoint.on_point then checkpoint.on_point(point, job.s) end
end

local function shape_of(spec) return json.array(spec.shape) end

-- Removes, after a save of `step` into dir: checkpoints of run_id older than the keep newest at
-- or before step (never those named in protect), and the step-N.tmp directories of interrupted
-- saves before step. Checkpoints of other runs, without a run_id (version 1), or after step (a
-- future abandoned by rolling back) stay.
local function prune(list, dir, step, keep, run_id, protect)
   local mine = {}
   for _, c in ipairs(list(dir)) do
      if run_id ~= nil and c.manifest.run_id == run_id and c.step <= step then
         mine[#mine + 1] = c
      end
   end
   for i = #mine - keep, 1, -1 do
      if not protect[mine[i].name] then files.remove_tree(mine[i].path) end
   end
   for _, name in ipairs(files.list(dir)) do
      local n = name:match("^step%-(%d+)%.tmp$")
      if n and tonumber(n) < step then files.remove_tree(dir .. "/" .. name) end
   end
end

-- One save's state: its arguments, where it writes, and the files' sizes and checksums (each
-- rank fills its own slot, rank 0 the model's).
local function new_save(dir, s, ck)
   local comm = s.comm or s.ddp.comm
   local final = dir .. "/" .. step_name(s.step)
   local job = { dir = dir, s = s, ck = ck, ddp = s.ddp, opt = s.opt, comm = comm, final = final,
                 tmp = final .. ".tmp", sizes = {}, crcs = {}, model_bytes = 0, model_crc = 0 }
   for r = 1, comm.size do job.sizes[r], job.crcs[r] = 0, 0 end
   return job
end

-- Runs work(job) on every rank; every rank then agrees whether it succeeded everywhere (a
-- collective), and raises the failing rank's error when not.
local function agreed(job, work) job.comm:agree(job.ck.protect(work, job)) end

-- Rank 0: DIR, and a new, empty DIR/step-N.tmp/ (an interrupted save of the same step removed,
-- and a link at its name removed, never followed: the save writes only into a directory it made).
local function prepare_dir(job)
   if job.comm.rank ~= 0 then return end
   files.make_dir(job.dir)
   files.remove_tree(job.tmp)
   files.make_new_dir(job.tmp)
end

-- The model on rank 0 (at ZeRO-3 gathered parameter by parameter, every rank taking part; under
-- expert parallelism with the other EP ranks' experts; under tensor parallelism the full
-- tensors, gathered over the TP group).
local function gather_model(job)
   job.params = job.ddp:params_on(0)
   if job.s.ep then ep.gather_experts(job.ddp, job.s.ep, job.params) end
   if job.s.tp then tp.gather_full(job.ddp, job.s.tp, job.params) end
end

-- This rank's optimizer state: step-N.tmp/optim-rNNNNN.safetensors.
local function write_optimizer_state(job)
   local rank = job.comm.rank
   local tensors, metadata = state.tensors(job.ddp, job.opt, job.s.tp)
   job.sizes[rank + 1], job.crcs[rank + 1] =
      safetensors.write(job.tmp .. "/" .. optim_name(rank), tensors, metadata)
   reached(job, "optim")
end

-- Rank 0: step-N.tmp/model.safetensors.
local function write_model(job)
   if job.comm.rank ~= 0 then return end
   job.model_bytes, job.model_crc = safetensors.write(job.tmp .. "/model.safetensors", job.params,
      { { "format", job.ck.module.FORMAT }, { "step", tostring(job.s.step) } })
   reached(job, "model")
end

local function write_data(job)
   write_optimizer_state(job)
   write_model(job)
end

-- Every rank's size and checksum in one all-reduce: each rank filled only its own slots.
local function share_sums(job)
   local comm, sizes, crcs = job.comm, job.sizes, job.crcs
   local both = {}
   for r = 1, comm.size do both[r], both[comm.size + r] = sizes[r], crcs[r] end
   both = comm:allreduce(both)
   for r = 1, comm.size do sizes[r], crcs[r] = both[r], both[comm.size + r] end
end

-- Rank 0: step-N.tmp/manifest.json, sealed with its own checksum.
local function write_manifest(job)
   local where = "checkpoint.save"
   local s, ddp, opt, comm = job.s, job.ddp, job.opt, job.comm
   local checkpoint = job.ck.module
   local file_list = json.array({ json.object({ name = "model.safetensors",
      bytes = job.model_bytes, crc32c = ("%08x"):format(job.model_crc) }) })
   for r = 1, comm.size do
      file_list[#file_list + 1] = json.object({ name = optim_name(r - 1), bytes = job.sizes[r],
         crc32c = ("%08x"):format(job.crcs[r]) })
   end
   -- the parameters written (rank 0's list: under expert parallelism every EP rank's experts)
   local spec_of = {}
   for _, spec in ipairs(ddp.specs) do spec_of[spec.name] = spec end
   local params = json.array()
   for _, t in ipairs(job.params) do
      local spec = spec_of[t.name] or t
      -- sizes: the blocks' rows when unequal (a QKV weight with fewer KV heads)
      local split = s.tp and spec.tp and json.object({ dim = spec.tp.dim,
         blocks = spec.tp.blocks or 1, rows = spec.tp.rows,
         sizes = spec.tp.sizes and json.array({ unpack(spec.tp.sizes) }) })
      params[#params + 1] = json.object({ name = t.name, shape = shape_of(t),
         optimizer = spec.optimizer, expert = spec.expert or nil, tp = split })
   end
   local step, skips = ffi.new("int64_t[1]"), ffi.new("int64_t[1]")
   C.check(lib.lw_optimizer_counters(opt._c, step, skips), where)
   local layout = ddp.layout
   local manifest = json.object({
      format = checkpoint.FORMAT, version = checkpoint.VERSION, step = s.step,
      ranks = comm.size, mode = ddp.mode, param_dtype = ddp.param_dtype,
      layout = json.object({ algorithm = layout.algorithm, adamw_layout = layout.adamw_layout,
         bucket_size = layout.bucket_size or json.null, hash = layout:hash(), dp = layout.dp,
         expert_dp = layout.expert_dp, zero = ddp.zero, shard = ddp.shard }),
      optimizer = json.object({ updates = tonumber(step[0]), skips = tonumber(skips[0]) }),
      ep = s.ep and s.ep.size or 1, tp = s.tp and s.tp.size or 1,
      extra = json.object(s.extra or {}), params = params, files = file_list,
      run_id = s.run_id or json.null, saved_at = lib.lw_wall_clock(),
      manifest_crc32c = "00000000",
   })
   local text = job.ck.seal(json.encode(manifest, "  ") .. "\n")
   C.check(lib.lw_file_write(job.tmp .. "/manifest.json", text, #text, nil), where)
   reached(job, "manifest")
end

-- Rank 0: step-N.tmp made durable and renamed to step-N, then `latest` replaced atomically
-- (and `best`, when the save is the best one).
local function publish(job)
   local where = "checkpoint.save"
   local dir = job.dir
   C.check(lib.lw_dir_sync(job.tmp), where)
   files.remove_tree(job.final)
   files.rename(job.tmp, job.final)
   reached(job, "rename")
   C.check(lib.lw_dir_sync(dir), where)
   local latest = step_name(job.s.step) .. "\n"
   for _, pointer in ipairs(job.s.best and { "latest", "best" } or { "latest" }) do
      C.check(lib.lw_file_write(dir .. "/" .. pointer .. ".tmp", latest, #latest, nil), where)
      files.rename(dir .. "/" .. pointer .. ".tmp", dir .. "/" .. pointer)
   end
   C.check(lib.lw_dir_sync(dir), where)
end

-- Rank 0: older checkpoints of the run beyond keep, never the new one nor those protected nor
-- the one `best` names.
local function prune_old(job)
   local s = job.s
   local protect = { [step_name(s.step)] = true }
   for _, p in ipairs(s.protect or {}) do protect[p:match("([^/]+)/*$")] = true end
   -- the lowest validation loss's, kept whatever keep says
   local ok, best = pcall(job.ck.module.pointer_name, job.dir, "best")
   if ok and best then protect[best] = true end
   prune(job.ck.module.list, job.dir, s.step, s.keep or 3, s.run_id, protect)
end

-- Rank 0: the manifest, then the checkpoint made visible, then pruning.
local function commit(job)
   if job.comm.rank ~= 0 then return end
   write_manifest(job)
   publish(job)
   prune_old(job)
end

-- checkpoint.save(dir, s) (init.lua says what s holds).
function saver.save(dir, s, ck)
   local job = new_save(dir, s, ck)
   local ok, err = pcall(function()
      agreed(job, prepare_dir)
      s.ddp:finish_param_sync()
      agreed(job, gather_model)
      agreed(job, write_data)
      share_sums(job)
      agreed(job, commit)
   end)
   if not ok then
      -- what a failed save wrote only takes space (on a full disk, the space the next save or
      -- the log needs); the checkpoints before it and `latest` are as they were
      if job.comm.rank == 0 then pcall(files.remove_tree, job.tmp) end
      errors.raise(err)
   end
   return job.final
end

return saver
