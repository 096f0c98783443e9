-- checkpoint/init.lua: save and load training state, keyed by parameter name (never by rank), so a
-- checkpoint loads at another rank count or layout (resharding). A checkpoint is a directory:
--   model.safetensors         every parameter, f32, consolidated (any safetensors reader)
--   optim-rNNNNN.safetensors  rank N's optimizer state: a tensor "<part>/<param>" per part of
--                             the parameter's rule (Muon's "m", AdamW's "m" and "v"), and
--                             metadata "<param>" = "<rule> <start> <count>" (element range;
--                             state.lua)
--   manifest.json             format, step, ranks, layout, hyper-parameters, schedule, data and
--                             RNG position, parameter names and shapes, every file's size and
--                             CRC32C, the run it belongs to, when it was saved, and a CRC32C of
--                             its own text
-- Under expert parallelism (s.ep: lw.ep.groups) model.safetensors and the manifest hold every
-- expert by global name, whichever EP rank trained it, and each rank's optimizer file its own
-- experts' state: a checkpoint loads at another EP size like at another rank count. Under tensor
-- parallelism (s.tp: lw.tp.groups) they hold the tp 1 model's full tensors, and each rank's
-- optimizer file the state of its shards, with the TP size and rank it was saved at ("... tp T
-- R"), the manifest saying how each tensor was split: a checkpoint loads at another TP size too.
-- Saving (save.lua) writes DIR/step-N.tmp/, fsyncs every file and the directory,
-- renames it to DIR/step-N/, then replaces DIR/latest atomically: a crash at any moment leaves
-- the previous checkpoint whole and `latest` pointing at it. All ranks agree that a save
-- succeeded.
-- Pruning (keep K) removes only checkpoints of the same run (lineage: run_id, kept across
-- resumes) with a valid manifest, older than the K newest at or before the step just written;
-- never the one just written, the one `latest` names, nor the ones the caller protects (the
-- checkpoint a run resumed from).
local ffi = require("ffi")
local C = require("lwopt.C")
local json = require("lwopt.json")
local files = require("lwopt.files")
local safetensors = require("lwopt.safetensors")
local tp = require("lwopt.tp")
local state = require("lwopt.checkpoint.state")
local finder = require("lwopt.checkpoint.find")
local errors = require("lwopt.errors")
local saver = require("lwopt.checkpoint.save")

local lib = C.lib
local checkpoint = {}

checkpoint.FORMAT = "lwopt-checkpoint"
checkpoint.VERSION = 2 -- 2: run_id and the manifest's own checksum; 1 still loads
local READS = { [1] = true, [2] = true }
-- The manifest's own checksum: the CRC32C of its text with this member's value zeroed.
local SELF_CRC = '"manifest_crc32c": "'

local fail = errors.fail

-- Hook point: nil, or a function(point, s) that checkpoint.save calls at each point of the
-- protocol, with save's own arguments s, for every save; s.on_point, when set, is called
-- first, for that save only. The points, in order (checkpoint.POINTS): "optim" (every rank,
-- its optimizer file written), "model" (rank 0, model.safetensors written), "manifest" (rank
-- 0, manifest.json written, the directory not yet synced nor renamed), "rename" (rank 0,
-- step-N.tmp renamed to step-N, latest not yet moved). Called inside the save's agreed work:
-- an error raised there fails the save on every rank like a failed write. The test-only faults
-- (tests/lua/faults.lua) end the job at a point, as a kill would.
checkpoint.on_point = nil
checkpoint.POINTS = { "optim", "model", "manifest", "rename" }

-- Runs fn(...); returns true, or false and its error as a string (for comm:agree).
local function protect(fn, ...)
   local ok, err = pcall(fn, ...)
   return ok, (not ok) and tostring(err) or nil
end

local function crc_of(text) return ("%08x"):format(lib.lw_crc32c(0, text, #text)) end

-- The manifest's text with its own checksum filled in: the CRC32C of the text as encoded, with
-- the value "00000000" in its place.
local function seal(text)
   -- an invariant: every manifest this module writes has the field
   local at = assert(text:find(SELF_CRC, 1, true), "manifest without manifest_crc32c")
   local value = at + #SELF_CRC
   return text:sub(1, value - 1) .. crc_of(text) .. text:sub(value + 8)
end

-- Whether a sealed manifest's text is intact; nil when it carries no checksum (version 1).
local function seal_intact(text)
   local at = text:find(SELF_CRC, 1, true)
   if at == nil then return nil end
   local value = at + #SELF_CRC
   local stored = text:sub(value, value + 7)
   return crc_of(text:sub(1, value - 1) .. "00000000" .. text:sub(value + 8)) == stored
end

-- The checkpoints in dir: { { name, step, path, manifest } ... } by step, oldest first, for the
-- step-N directories whose manifest reads and is intact; others are listed in `.broken`.
function checkpoint.list(dir)
   local out = { broken = {} }
   if files.kind(dir) ~= "dir" then return out end
   for _, name in ipairs(files.list(dir)) do
      local n = name:match("^step%-(%d+)$")
      -- a directory, not a link to one: what lwopt saved, and may prune
      if n and files.entry_kind(dir .. "/" .. name) == "dir" then
         local ok, m = pcall(checkpoint.read_manifest, dir .. "/" .. name, { files = false })
         if ok then
            out[#out + 1] = { name = name, step = tonumber(n), path = dir .. "/" .. name,
               manifest = m }
         else
            out.broken[#out.broken + 1] = { name = name, reason = m }
         end
      end
   end
   table.sort(out, function(a, b) return a.step < b.step end)
   return out
end

-- The most `latest` (or `best`) holds: a checkpoint's name and a newline.
local LATEST_BYTES = 64

-- The name the pointer file `pointer` ("latest", the default, or "best") holds in dir
-- ("step-N"), nil when there is no such file. Read only as the small regular file lwopt writes
-- (never a link, a FIFO or a device, which could hang a resume).
local function latest_name(dir, pointer)
   local path = dir .. "/" .. (pointer or "latest")
   if files.entry_kind(path) == "missing" then return nil end
   local text, why = files.read(path, LATEST_BYTES, { follow = false })
   if text == nil then fail("checkpoint", "%s", why) end
   local name = text:match("^(step%-%d+)\n?$")
   if name == nil then fail("checkpoint", "%s does not name a checkpoint", path) end
   return name
end

-- A new lineage id for a run that starts from scratch (the same on every rank: rank 0's).
function checkpoint.new_run_id(comm)
   local id = ("%08x%06x"):format(os.time() % 2 ^ 32, math.floor(lib.lw_now() * 1e6) % 2 ^ 24)
   return comm:broadcast_string(id, 0)
end

-- checkpoint.save(dir, { ddp, opt, step, keep = 3, extra = { ... }, run_id, protect = { path
-- or name, ... }, best, on_point, ep }): collective; every rank calls it. best: `best` names the
-- new checkpoint too (the one `best` names is never pruned). extra goes into the manifest
-- (hyper-parameters, schedule, data and RNG position); run_id names the run's lineage for
-- pruning (nil: nothing is pruned); on_point is a hook (checkpoint.on_point); ep the run's
-- expert-parallel groups (lw.ep.groups), tp its tensor-parallel ones (lw.tp.groups) with comm,
-- the world's communicator (ddp's is then the DP group's), when it has them. Returns the
-- checkpoint's directory; a failure is raised on every rank alike, its step-N.tmp removed.
function checkpoint.save(dir, s)
   return saver.save(dir, s, { module = checkpoint, seal = seal, protect = protect })
end

-- The checkpoint directory `latest` names in dir; nil when there is none.
function checkpoint.latest(dir)
   local name = latest_name(dir)
   return name and dir .. "/" .. name
end

-- The checkpoint directory `best` names in dir (the lowest validation loss of a run saved with
-- best = true, kept whatever keep says); nil when there is none.
function checkpoint.best(dir)
   local name = latest_name(dir, "best")
   return name and dir .. "/" .. name
end
checkpoint.pointer_name = latest_name

-- The files a save writes in a checkpoint directory that name a checkpoint, and the names they
-- are written as first.
local POINTERS = { "latest", "latest.tmp", "best", "best.tmp" }

-- The file in a checkpoint directory whose lock a run holds while it trains (checkpoint.lock).
checkpoint.LOCK_NAME = ".lwopt-lock"

-- Whether a name in a checkpoint directory is one that saves or the run's lock write: step-N,
-- step-N.tmp, latest, best and their .tmp, the lock file.
function checkpoint.writes_name(name)
   for _, pointer in ipairs(POINTERS) do if name == pointer then return true end end
   return name == checkpoint.LOCK_NAME
      or name:match("^step%-%d+$") ~= nil or name:match("^step%-%d+%.tmp$") ~= nil
end

-- Locks dir (created if missing) for this process, so that no other job saves into it while
-- this one runs: the lock ({ release = function }) is held until released or until the process
-- ends, however it ends. nil, a message and true when another job holds it (the message names
-- its host and pid: "DIR is in use by another job (host h, pid p)"); nil and why when it
-- cannot be taken.
function checkpoint.lock(dir)
   files.make_dir(dir)
   local lock, err = files.lock(dir .. "/" .. checkpoint.LOCK_NAME)
   if lock then return lock end
   local holder = err:match("is locked by another process %((.*)%)$")
   if holder then return nil, ("%s is in use by another job (%s)"):format(dir, holder), true end
   return nil, err, false
end

-- Checks that the names a save writes in dir besides its step-N directories (`latest`, `best`
-- and the .tmp files they are renamed from) are free or regular files: found now, not at the
-- first save after training. Returns true, or nil and a message naming the path.
function checkpoint.check_dir(dir)
   for _, name in ipairs(POINTERS) do
      local path = dir .. "/" .. name
      local kind = files.kind(path)
      if kind == "dir" or kind == "other" then
         return nil, ("%s is %s, where checkpoints keep the file that names the newest of "
            .. "them: move it away or choose another directory"):format(path,
            kind == "dir" and "a directory" or "not a regular file")
      end
   end
   return true
end

-- Whether dir holds checkpoints (a `latest` file or a step-N directory with a manifest), and a
-- few words on what: for refusing to write a new run over them.
function checkpoint.holds(dir)
   if files.kind(dir) ~= "dir" then return false end
   local found = checkpoint.list(dir)
   if #found > 0 then
      return true, ("%d checkpoint%s, the newest %s"):format(#found, #found == 1 and "" or "s",
         found[#found].name)
   end
   if files.kind(dir .. "/latest") ~= "missing" then return true, "a latest file" end
   for _, b in ipairs(found.broken) do
      if files.kind(dir .. "/" .. b.name .. "/manifest.json") ~= "missing" then
         return true, "checkpoint " .. b.name .. " (damaged)"
      end
   end
   return false
end

-- The checkpoint to resume from in dir: { path, step, manifest, note }, where note says why it
-- is not the one `latest` names (missing or damaged) and what was passed over: the newest whole
-- checkpoint of the same run (find.lua; opts.strict: none but latest's); nil and the
-- reason when there is none to resume.
function checkpoint.find(dir, opts)
   return finder.find(dir, opts, { list = checkpoint.list, latest_name = latest_name,
      read_manifest = checkpoint.read_manifest })
end

-- The largest manifest read: far more than the parameter list of any model needs.
local MANIFEST_BYTES = 64 * 2 ^ 20

-- Whether a manifest's file name is a plain name inside the checkpoint (no directory part, no
-- "." or ".."): a manifest may be written by anyone, and never points a read elsewhere.
local function plain_name(name)
   return type(name) == "string" and name ~= "" and name ~= "." and name ~= ".."
      and not name:find("[/%z\\]")
end

-- Reads and checks manifest.json (and, unless opts.files == false, the files' sizes and
-- checksums). Only regular files are read, links refused: a checkpoint's files are lwopt's own.
function checkpoint.read_manifest(path, opts)
   local where = "checkpoint.load"
   local file = path .. "/manifest.json"
   local kind = files.entry_kind(file)
   if kind == "missing" then fail(where, "%s is not a checkpoint (no manifest.json)", path) end
   local text, why = files.read(file, MANIFEST_BYTES, { follow = false })
   if text == nil then fail(where, "%s", why) end
   local ok, m = pcall(json.decode, text)
   if not ok then fail(where, "%s/manifest.json: %s", path, m) end
   if type(m) ~= "table" or m.format ~= checkpoint.FORMAT then
      fail(where, "%s/manifest.json is not an lwopt checkpoint manifest", path)
   end
   if not READS[m.version] then
      fail(where, "%s has format version %s; this lwopt reads versions 1 and %d", path,
         tostring(m.version), checkpoint.VERSION)
   end
   if m.version >= 2 and not seal_intact(text) then
      fail(where, "%s/manifest.json fails its own checksum: it was edited or corrupted", path)
   end
   if type(m.files) ~= "table" or type(m.params) ~= "table" or type(m.step) ~= "number" then
      fail(where, "%s/manifest.json lacks files, params or step", path)
   end
   for _, file in ipairs(m.files) do
      if type(file) ~= "table" or not plain_name(file.name) then
         fail(where, "%s/manifest.json names a file %s, which is not a plain name inside the "
            .. "checkpoint", path, type(file) == "table" and ("'%s'"):format(tostring(file.name))
            or "entry that is not an object")
      end
   end
   if opts and opts.files == false then return m end
   local bytes, crc = ffi.new("int64_t[1]"), ffi.new("uint32_t[1]")
   for _, file in ipairs(m.files) do
      local full = path .. "/" .. file.name
      if lib.lw_file_checksum(full, bytes, crc) ~= 0 then
         fail(where, "%s: missing or unreadable (%s)", full,
            (C.last_error():gsub("^files: ", "")))
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

-- Checks the parameters of the checkpoint at path against ddp's model (under expert parallelism,
-- g: lw.ep.groups, this rank's share of it: the dense parameters and its EP rank's experts);
-- a TP shard against its tensor in the tp 1 model (lw.tp.model_shape). Returns the open file.
local function check_params(path, ddp, m, g)
   local where = "checkpoint.load"
   local by_name = {}
   for _, p in ipairs(m.params) do by_name[p.name] = p end
   for _, spec in ipairs(ddp.specs) do
      local p = by_name[spec.name]
      if p == nil then fail(where, "%s has no parameter '%s': another model?", path, spec.name) end
      local shape = tp.model_shape(spec)
      local same = #p.shape == #shape
      for d = 1, #shape do same = same and p.shape[d] == shape[d] end
      if not same then
         fail(where, "'%s' has shape {%s} in %s but {%s} in the model", spec.name,
            table.concat(p.shape, ", "), path, table.concat(shape, ", "))
      end
   end
   -- the model's whole count: the other EP ranks hold as many experts as this one
   local experts = 0
   for _, spec in ipairs(ddp.specs) do experts = experts + (spec.expert and 1 or 0) end
   local whole = #ddp.specs + (g and (g.size - 1) * experts or 0)
   if #m.params ~= whole then
      fail(where, "%s has %d parameters, the model %d: another model?", path, #m.params, whole)
   end
   local st = safetensors.open(path .. "/model.safetensors", where)
   for _, spec in ipairs(ddp.specs) do
      local view = safetensors.find(st, spec.name)
      if view == nil or ffi.string(view.dtype) ~= "F32"
         or tonumber(view.bytes) ~= 4 * tp.numel(tp.model_shape(spec)) then
         fail(where, "%s/model.safetensors: '%s' is missing or has the wrong size", path, spec.name)
      end
   end
   return st
end

-- Writes the checked parameters into ddp (a TP shard: its slice of the full tensor; g:
-- lw.tp.groups): collective at ZeRO-3, so it runs only once every rank has agreed that its
-- checks passed. masters (name -> float*, or nil): the fp32 values to write instead of the
-- file's (a bf16 checkpoint's master weights, for an fp32 run).
local function write_params(st, ddp, g, masters)
   for _, spec in ipairs(ddp.specs) do
      local data = masters and masters[spec.name] or safetensors.find(st, spec.name).data
      ddp:with_param(spec.name, function(target)
         if spec.tp and g then
            tp.from_model(ffi.cast("const float *", data), spec, g.size, g.rank, target.data)
         else
            ffi.copy(target.data, data, 4 * target.numel)
         end
      end)
   end
end

-- How the checkpoint's parameters become this run's, in one line, when their dtypes differ
-- (nil when they do not); with_state: the optimizer state is loaded too.
local function conversion(m, ddp, with_state)
   local was, now = m.param_dtype or "f32", ddp.param_dtype
   if was == now then return nil end
   if now == "f32" then
      return "bf16 parameters -> fp32: the checkpoint's fp32 master weights become the parameters"
   end
   return "fp32 parameters -> bf16: rounded to nearest even" .. (with_state
      and "; the checkpoint's fp32 parameters become the master weights" or "")
end

-- checkpoint.load(path, { ddp, opt = nil | optimizer, weights_only = false, ep, tp, comm }):
-- collective. Restores parameters and (unless weights_only or no opt) the optimizer state,
-- resharding to this run's ranks, layout, expert-parallel groups (ep: lw.ep.groups, when the
-- run has them; each rank loads its own experts by global name) and tensor-parallel groups (tp:
-- lw.tp.groups, with comm the world's communicator; each rank its shards), and parameter dtype
-- (bf16 parameters with fp32 master weights, or fp32: the exact fp32 weights are kept across the
-- change). Returns the manifest (step, extra; conversion: the line that says how the parameters'
-- dtype changed, or nil).
function checkpoint.load(path, s)
   local comm = s.comm or s.ddp.comm
   local m, st, masters
   local with_state = s.opt ~= nil and not s.weights_only
   local ok, err = protect(function()
      m = checkpoint.read_manifest(path)
      st = check_params(path, s.ddp, m, s.ep)
      if with_state then state.load(path, s.ddp, s.opt, m, s.tp, st) end
      -- an fp32 run reads a bf16 checkpoint's exact weights: its master weights
      if s.ddp.param_dtype == "f32" then masters = state.master_params(path, m) end
   end)
   comm:agree(ok, err)
   write_params(st, s.ddp, s.tp, masters)
   s.ddp:broadcast_params(0) -- the same on every rank, byte for byte
   -- the master weights loaded above stay: not widened from the parameters just written
   if with_state then C.check(lib.lw_optimizer_keep_master(s.opt._c), "checkpoint.load") end
   m.conversion = conversion(m, s.ddp, with_state)
   return m
end

return checkpoint
