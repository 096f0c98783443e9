-- checkpoint/state.lua: a rank's optimizer state in a checkpoint (lw.checkpoint's format, see
-- init.lua): written as a tensor "<part>/<param>" for each named part of the parameter's rule
-- (lw.optim.kinds: Muon's "m"; AdamW's "m" and "v"; NorMuon's "m" and its "v" of one float per
-- line of the matrix, whose owner holds it whole), and with bf16 parameters "w/<param>" (the
-- fp32 master weights), of the element ranges this rank holds, each range's metadata
-- "<rule> START COUNT" (with " tp T R" under tensor parallelism); loaded by every rank for the
-- ranges it holds now, whatever ranks, layout, ZeRO level, expert-parallel or TP size,
-- parameter dtype saved them (resharding). Checkpoints written before the rules were a table
-- have the same names. A matrix saved under Muon loads into NorMuon and back: the parts of the
-- same name carry over, NorMuon's v starts at zero or is dropped, and each says so on stderr.
local ffi = require("ffi")
local C = require("lwopt.C")
local safetensors = require("lwopt.safetensors")
local tp = require("lwopt.tp")
local errors = require("lwopt.errors")
local kinds = require("lwopt.optim_kinds")

local lib = C.lib
local state = {}

local fail = errors.fail

-- Rank r's optimizer file in a checkpoint directory.
function state.file_name(rank) return ("optim-r%05d.safetensors"):format(rank) end

-- This rank's optimizer state as tensors and metadata pairs; under tensor parallelism (g:
-- lw.tp.groups) each range says the TP size and rank whose shard it is.
function state.tensors(ddp, opt, g)
   local tensors, metadata = {}, {}
   local where = g and (" tp %d %d"):format(g.size, g.rank) or ""
   local entry = ffi.new("lw_state_entry")
   for k = 0, lib.lw_optimizer_state_count(opt._c) - 1 do
      C.check(lib.lw_optimizer_state(opt._c, k, entry), "checkpoint.save")
      local name = ddp.specs[entry.param + 1].name
      local count = tonumber(entry.count)
      local kind = kinds[C.name("optimizer_kind", entry.optimizer)]
      -- the state is device memory: host copies where the host cannot read it
      for i, part in ipairs(kind.parts) do
         local n = tonumber(entry.part_counts[i - 1])
         local data = ddp:host_floats(entry.parts[i - 1], n)
         tensors[#tensors + 1] = { name = part .. "/" .. name, data = data, count = n }
      end
      if entry.master ~= nil then
         tensors[#tensors + 1] = { name = "w/" .. name,
                                   data = ddp:host_floats(entry.master, count), count = count }
      end
      metadata[#metadata + 1] = { name, ("%s %d %d%s"):format(kind.name, tonumber(entry.start),
         count, where) }
   end
   return tensors, metadata
end

-- A saved range's metadata: "<rule> START COUNT", with " tp T R" when saved under tensor
-- parallelism: kind, start, count, T, R (1, 0 without).
local function parse_range(meta)
   local kind, s0, c0, rest = meta:match("^([%w_]+) (%d+) (%d+)(.*)$")
   if kind == nil then return nil end
   local t, r = rest:match("^ tp (%d+) (%d+)$")
   if rest ~= "" and t == nil then return nil end
   return kind, tonumber(s0), tonumber(c0), tonumber(t) or 1, tonumber(r) or 0
end

-- The parts of a saved state: the rule's (lw.optim.kinds), and "w" (master weights).
local function parts_of(kind, master)
   local parts = { unpack(kinds[kind].parts) }
   if master then parts[#parts + 1] = "w" end
   return parts
end

-- The floats of a part per line of a rows x cols matrix (shape: its dimensions, the first the
-- rows): one per row when rows >= cols, else per column.
local function lines_of(shape)
   local rows, n = shape[1], tp.numel(shape)
   return math.max(rows, n / rows)
end

-- The tensors of a saved range, by part, each checked to hold exactly the range's count of f32
-- values (lines[part]: a per-line part's count instead): a checksum anyone can recompute bounds
-- nothing, so every read below stays within what the file holds whatever its manifest and
-- metadata say.
local function range_views(path, rank, st, name, parts, count, lines)
   local views = {}
   for _, part in ipairs(parts) do
      local count = lines[part] or count
      local key = part .. "/" .. name
      local view = safetensors.find(st, key)
      if view == nil then
         fail("checkpoint.load", "%s lacks the state tensors of '%s'", path, name)
      end
      local dtype, bytes = ffi.string(view.dtype), tonumber(view.bytes)
      if dtype ~= "F32" or bytes ~= 4 * count then
         fail("checkpoint.load", "%s/%s: '%s' holds %s, but its range says %d F32 values: "
            .. "damaged or written by something else", path, state.file_name(rank), key,
            dtype == "F32" and ("%d values"):format(bytes / 4) or (dtype .. " data"), count)
      end
      views[part] = ffi.cast("const float *", view.data)
   end
   return views
end

-- The ranges this rank needs of parameter `name` (optimized by `kind` when saved, as the manifest
-- says), in the state saved for it: calls take(views, s0, c0, t, r) for every saved range (of
-- every saved rank's file), views the range's tensors by part (range_views; lines: the per-line
-- parts' counts); ranges a TP rank other than 0 saved of a tensor replicated over TP are the
-- same as TP rank 0's and left out.
local function saved_ranges(path, opened, name, kind, parts, split, take, lines)
   for rank, st in ipairs(opened) do
      local meta = lib.lw_safetensors_metadata(st, name)
      if meta ~= nil then
         local saved_kind, s0, c0, t, r = parse_range(ffi.string(meta))
         if saved_kind == nil then
            fail("checkpoint.load", "the optimizer state of '%s' has an unreadable range '%s'",
               name, ffi.string(meta))
         end
         if kinds[saved_kind] == nil or type(kinds[saved_kind]) ~= "table" then
            fail("checkpoint.load", "'%s' was optimized by '%s' in %s, a rule this lwopt does "
               .. "not have (%s)", name, saved_kind, path, kinds.list())
         end
         if saved_kind ~= kind then
            fail("checkpoint.load", "'%s' was optimized by %s in %s, but its manifest says %s",
               name, saved_kind, path, kind)
         end
         if split or r == 0 then
            take(range_views(path, rank - 1, st, name, parts, c0, lines or {}), s0, c0, t, r)
         end
      end
   end
end

-- The state of one parameter in the tp 1 model's coordinates (p: its manifest entry, with
-- tp = { dim, blocks, rows, sizes } when it was saved TP-sharded), assembled from every saved range:
-- { <part> = float* for each of parts, seen (uint8*: elements some range held) }.
local function assemble_full(path, opened, p, kind, parts)
   local n = tp.numel(p.shape)
   local full = { seen = ffi.new("uint8_t[?]", n) }
   for _, part in ipairs(parts) do full[part] = ffi.new("float[?]", n) end
   saved_ranges(path, opened, p.name, kind, parts, p.tp ~= nil, function(views, s0, c0, t, r)
      -- each run of the saved shard that lies in [s0, s0 + c0), to its place (padding dropped)
      local function put(l, f, len)
         local a, b = math.max(l, s0), math.min(l + len, s0 + c0)
         b = math.min(b, a + (n - (f + a - l)))
         if b <= a then return end
         local at = f + a - l
         for _, part in ipairs(parts) do
            ffi.copy(full[part] + at, views[part] + (a - s0), 4 * (b - a))
         end
         ffi.fill(full.seen + at, b - a, 1)
      end
      if p.tp and t > 1 then
         local padded = { unpack(p.shape) }
         if p.tp.rows then padded[1] = tp.padded(p.tp.rows, t) end
         tp.runs(padded, p.tp, t, r, put)
      else
         put(0, 0, n)
      end
   end)
   return full
end

-- The arrays a state entry loads into, by part: its rule's parts, and w (the master weights,
-- when loaded from the checkpoint's).
local function targets_of(entry, parts)
   local device = { w = entry.master }
   local kind = kinds[C.name("optimizer_kind", entry.optimizer)]
   for i, part in ipairs(kind.parts) do device[part] = entry.parts[i - 1] end
   local out = {}
   for _, part in ipairs(parts) do out[part] = device[part] end
   return out
end

-- Loads one state entry of a parameter sharded over TP now or when saved (spec: this rank's, g:
-- lw.tp.groups or nil; p: the manifest's entry): its range of this rank's shard, cut out of the
-- tp 1 tensor's state; elements of the vocabulary's padding start at 0.
local function load_resharded(path, opened, ddp, entry, spec, g, p, kind, parts)
   local full = assemble_full(path, opened, p, kind, parts)
   local start, count = tonumber(entry.start), tonumber(entry.count)
   local n = tp.numel(p.shape)
   local host = {}
   for _, part in ipairs(parts) do host[part] = ffi.new("float[?]", count) end
   local covered = 0
   local function take(l, f, len)
      local a, b = math.max(l, start), math.min(l + len, start + count)
      for i = a, b - 1 do
         local at = f + i - l
         if at >= n then -- padding: no state to load
            covered = covered + 1
         elseif full.seen[at] == 1 then
            for _, part in ipairs(parts) do host[part][i - start] = full[part][at] end
            covered = covered + 1
         end
      end
   end
   if spec.tp and g then tp.runs(spec.full_shape, spec.tp, g.size, g.rank, take)
   else take(0, 0, tp.numel(spec.shape)) end
   if covered ~= count then
      fail("checkpoint.load", "%s holds state for %d of the %d elements of '%s' this rank needs",
         path, covered, count, spec.name)
   end
   for part, target in pairs(targets_of(entry, parts)) do ddp:from_host(target, host[part], count) end
end

-- Loads one state entry of a parameter that no TP split touches: the saved ranges it
-- intersects, copied straight.
-- A per-line part (lines: part -> its count) belongs to the matrix's owner, which holds the whole
-- matrix now and did when saved: copied whole from the range that held the whole matrix.
local function load_direct(path, opened, ddp, entry, spec, kind, parts, lines)
   local name = spec.name
   local start, count = tonumber(entry.start), tonumber(entry.count)
   local targets = targets_of(entry, parts)
   local covered = 0
   saved_ranges(path, opened, name, kind, parts, false, function(views, s0, c0)
      local lo, hi = math.max(start, s0), math.min(start + count, s0 + c0)
      if hi <= lo then return end
      for part, target in pairs(targets) do
         if not lines[part] then
            ddp:from_host(target + (lo - start), views[part] + (lo - s0), hi - lo)
         elseif s0 == 0 and c0 == count and start == 0 then
            ddp:from_host(target, views[part], lines[part])
         else
            fail("checkpoint.load", "%s holds %s/%s for elements %d to %d of its %d, but that "
               .. "part belongs to the whole matrix's owner", path, part, name, s0, s0 + c0,
               tp.numel(spec.shape))
         end
      end
      covered = covered + (hi - lo)
   end, lines)
   if covered ~= count then
      fail("checkpoint.load", "%s holds state for %d of the %d elements of '%s' this rank needs",
         path, covered, count, name)
   end
end

-- The master weights of a state entry from the checkpoint's fp32 parameters (st: its open
-- model.safetensors), for a bf16 run resuming an fp32 one: exact, where widening the rounded
-- parameters would not be.
local function masters_from_params(ddp, entry, spec, st, g)
   local view = safetensors.find(st, spec.name)
   local src = ffi.cast("const float *", view.data)
   if spec.tp and g then
      local shard = ffi.new("float[?]", tp.numel(spec.shape))
      tp.from_model(src, spec, g.size, g.rank, shard)
      src = shard
   end
   ddp:from_host(entry.master, src + tonumber(entry.start), tonumber(entry.count))
end

-- The fp32 parameters a bf16 checkpoint's master weights hold, assembled over every saved rank
-- (name -> float* in the tp 1 model's shape), for a run that reads them as its parameters; nil
-- when the checkpoint has no master weights (fp32 parameters).
function state.master_params(path, m)
   if m.param_dtype ~= "bf16" then return nil end
   local opened = {}
   for r = 0, m.ranks - 1 do
      opened[r + 1] = safetensors.open(path .. "/" .. state.file_name(r), "checkpoint.load")
   end
   local out = {}
   for _, p in ipairs(m.params) do
      local full = assemble_full(path, opened, p, p.optimizer, { "w" })
      for i = 0, tp.numel(p.shape) - 1 do
         if full.seen[i] ~= 1 then
            fail("checkpoint.load", "%s holds no master weight for element %d of '%s'", path, i,
               p.name)
         end
      end
      out[p.name] = full.w
   end
   return out
end

-- Rules whose saved state another may take (their whole-matrix step and momentum are the same):
-- the parts of the same name carry over, the new rule's others start at zero.
local CARRIES = { muon = { normuon = true }, normuon = { muon = true } }
local PART_WORDS = { m = "momentum", v = "second moment" }

-- The parts to load of a parameter saved under rule `saved` and optimized by `kind` now (with
-- "w" when the master weights are saved): a rule change other than CARRIES' is refused, and
-- each part one rule has and the other lacks is announced on stderr.
local function carried_parts(path, name, saved, kind, master)
   if saved == kind then return parts_of(kind, master) end
   if not (CARRIES[saved] and CARRIES[saved][kind]) then
      fail("checkpoint.load", "'%s' was optimized by %s in %s, by %s now", name, saved, path,
         kind)
   end
   local had, parts = {}, {}
   for _, part in ipairs(kinds[saved].parts) do had[part] = true end
   for _, part in ipairs(parts_of(kind, master)) do
      if had[part] or part == "w" then
         parts[#parts + 1] = part
      else
         io.stderr:write(("'%s' was optimized by %s; %s starts its %s fresh\n"):format(name,
            saved, kind, PART_WORDS[part] or part))
      end
      had[part] = nil
   end
   for _, part in ipairs(kinds[saved].parts) do
      if had[part] then
         io.stderr:write(("'%s' was optimized by %s; %s drops its %s\n"):format(name, saved,
            kind, PART_WORDS[part] or part))
      end
   end
   return parts
end

-- Loads this rank's optimizer state: each rule's parts (Muon's momentum of each matrix it owns
-- now, AdamW's m and v of its element ranges), intersected with the ranges every saved rank held (resharding); a tensor
-- split over TP now or when saved (g: lw.tp.groups) by way of the tp 1 tensor's state. With
-- bf16 parameters now, the master weights too: the checkpoint's, or its fp32 parameters (st:
-- its open model.safetensors) when it has none.
function state.load(path, ddp, opt, m, g, st)
   local where = "checkpoint.load"
   local opened = {}
   for r = 0, m.ranks - 1 do
      opened[r + 1] = safetensors.open(path .. "/" .. state.file_name(r), where)
   end
   local by_name = {}
   for _, p in ipairs(m.params) do by_name[p.name] = p end
   local entry = ffi.new("lw_state_entry")
   for k = 0, lib.lw_optimizer_state_count(opt._c) - 1 do
      C.check(lib.lw_optimizer_state(opt._c, k, entry), where)
      local spec = ddp.specs[entry.param + 1]
      local kind = C.name("optimizer_kind", entry.optimizer)
      local p = by_name[spec.name]
      local saved_master = entry.master ~= nil and m.param_dtype == "bf16"
      local saved = p.optimizer or kind
      local parts = carried_parts(path, spec.name, saved, kind, saved_master)
      local lines = {}
      for _, part in ipairs(parts) do
         if kinds[kind].lines[part] then lines[part] = lines_of(p.shape) end
      end
      if p.tp or (spec.tp and g) then
         if next(lines) ~= nil then
            fail(where, "'%s' is split over tensor parallelism (now or when saved), but %s's "
               .. "per-line state is its whole matrix's", spec.name, kind)
         end
         load_resharded(path, opened, ddp, entry, spec, g, p, saved, parts)
      else
         load_direct(path, opened, ddp, entry, spec, saved, parts, lines)
      end
      if entry.master ~= nil and not saved_master then masters_from_params(ddp, entry, spec, st, g) end
   end
   C.check(lib.lw_optimizer_set_counters(opt._c, m.optimizer.updates, m.optimizer.skips), where)
end

return state
