-- tp.lua: tensor parallelism's process grid and shard layout (docs/algorithms.md section 9). The
-- world of W ranks splits into W/t TP groups of t consecutive ranks (TP innermost: world rank r is
-- in TP group floor(r / t), at TP rank r % t) and t data-parallel groups (the ranks with the same
-- TP rank, at DP rank floor(r / t)). The TP ranks of a group hold the slices of every layer's
-- matrices (lw.nn's column- and row-parallel linears, the vocabulary-parallel embedding and LM
-- head) and see the same batch; each DP group averages its TP rank's slices and the replicated
-- tensors (lw.ddp.new over dp_comm). A TP-sharded spec carries tp = { dim, blocks, sizes, rows }
-- and full_shape: along dimension dim (0-based) the full tensor is `blocks` consecutive blocks,
-- equal or of the sizes listed (a fused QKV weight with fewer KV heads: { q, k, v }), each split
-- into t contiguous pieces, and TP rank r holds piece r of every block, in block order;
-- rows, on the vocabulary tables, says how many of the full tensor's rows are the model's (the rest
-- pad the vocabulary to a multiple of t: lw.tp.padded).
-- Not here: the optimizer's TP modes and the TP-aware gradient norm (lw.optim).
local ffi = require("ffi")
local errors = require("lwopt.errors")

local tp = {}

-- The library, loaded at the first collective: tp.check and the layout helpers stay pure Lua
-- (lw.arch uses them).
local function C() return require("lwopt.C") end

local function is_count(v) return type(v) == "number" and v == math.floor(v) and v >= 1 end

-- The vocabulary rows a group of t holds: vocab rounded up to a multiple of t (the rows past
-- vocab are padding: never looked up, their logits masked).
function tp.padded(vocab, t) return t * math.ceil(vocab / t) end

-- Refuses a TP size that does not divide the world or the model, naming the numbers; nil when
-- it is good. dims (all optional): n_head, n_embd, hidden (the MLP's), vocab (refused unless
-- pad_vocab: lw.nn.GPT and lw.arch.gpt pad it), n_expert, ep. Needs no communicator.
function tp.check(t, world, dims)
   dims = dims or {}
   if not is_count(t) then return ("tp (%s) must be a positive integer"):format(tostring(t)) end
   if world and world % t ~= 0 then
      return ("tp %d does not divide the %d rank%s (the world splits into TP groups of tp "
         .. "consecutive ranks)"):format(t, world, world == 1 and "" or "s")
   end
   if t == 1 then return nil end
   if (dims.ep or 1) > 1 then
      return ("tp %d with ep %d: tensor and expert parallelism together are not supported yet "
         .. "(use one of them)"):format(t, dims.ep)
   end
   if (dims.n_expert or 0) > 0 then
      return ("tp %d with a mixture of experts (%d experts): tensor parallelism splits dense "
         .. "models only for now"):format(t, dims.n_expert)
   end
   -- what: the number's words, with %d for it
   local function divides(n, what, why)
      if n and n % t ~= 0 then
         return ("tp %d does not divide " .. what .. " (%s)"):format(t, n, why)
      end
   end
   return divides(dims.n_head, "the %d attention heads", "each TP rank holds n_head / tp heads")
      or divides(dims.n_embd, "n_embd %d", "each TP rank holds n_embd / tp of the attention's "
         .. "channels")
      or divides(dims.hidden, "the MLP's hidden size %d", "each TP rank holds hidden / tp of "
         .. "its channels")
      or (not dims.pad_vocab and divides(dims.vocab, "the vocabulary of %d", ("each TP rank "
         .. "holds vocab / tp rows; pad it to %d"):format(tp.padded(dims.vocab or 0, t))))
      or nil
end

-- tp.groups(comm, t) -> { size = t, rank (TP rank, r % t), group (floor(r / t)), comm (the TP
-- group's communicator), dp_comm (the DP group's), dp_size (W / t), dp_rank (= group) }.
-- Collective over comm (two comm:split). Errors as tp.check with the world alone.
function tp.groups(comm, t)
   local bad = tp.check(t, comm.size)
   if bad then errors.misuse("lw.tp", "%s", bad) end
   local r = comm.rank
   local g = { size = t, rank = r % t, group = math.floor(r / t) }
   g.comm = comm:split(g.group, r)
   g.dp_comm = comm:split(g.rank, r)
   g.dp_size, g.dp_rank = g.dp_comm.size, g.group
   return g
end

-- The communicator that moves `device`'s memory within the TP group: the group's own on the
-- CPU, a device communicator over it otherwise (made once, collectively, at the first use, and
-- shared by every module through the groups table).
function tp.payload_comm(g, device)
   device = device or C().lib.lw_device_cpu()
   if g.comm:reaches(device) then return g.comm end
   if not g.device_comm then g.device_comm = require("lwopt.comm").device(g.comm, device) end
   return g.device_comm
end

-- In-place sum of n floats of `device`'s memory over the TP group (blocking, ordered after the
-- work issued so far on the device's stream); label names it in a timeout's message.
function tp.allreduce(g, device, data, n, label)
   local pc = tp.payload_comm(g, device)
   pc:set_label(label)
   local lib = C().lib
   C().check(lib.lw_comm_allreduce(pc._c, data, n, lib.LW_DTYPE_F32, lib.LW_REDUCE_SUM), "lw.tp")
end

-- In place: TP rank j's part data[j * n / t, +n / t) of n floats to every rank of the group.
function tp.allgather(g, device, data, n, label)
   local pc = tp.payload_comm(g, device)
   pc:set_label(label)
   local lib = C().lib
   C().check(lib.lw_comm_allgather(pc._c, data, n, lib.LW_DTYPE_F32, nil), "lw.tp")
end

-- ---- the shard layout -------------------------------------------------------------------------

local function numel(shape)
   local k = 1
   for _, d in ipairs(shape) do k = k * d end
   return k
end
tp.numel = numel

-- Calls fn(local_offset, full_offset, count) for each contiguous run of TP rank r's shard of a
-- tensor of full_shape sharded as info ({ dim, blocks, sizes }) over t ranks, in the shard's
-- order (offsets and counts in elements of the row-major tensors).
function tp.runs(full_shape, info, t, r, fn)
   local dim, blocks = info.dim, info.blocks or 1
   local outer, inner = 1, 1
   for i, d in ipairs(full_shape) do
      if i - 1 < dim then outer = outer * d elseif i - 1 > dim then inner = inner * d end
   end
   local size = full_shape[dim + 1]
   local sizes = info.sizes
   if not sizes then
      sizes = {}
      for k = 1, blocks do sizes[k] = size / blocks end
   end
   local sum = 0
   for _, n in ipairs(sizes) do
      sum = sum + n
      if n / t ~= math.floor(n / t) then sum = -1 break end
   end
   if #sizes ~= blocks or sum ~= size then
      errors.misuse("lw.tp", "dimension %d of %s (%d) does not split into %d blocks (%s) of %d "
         .. "pieces", dim, table.concat(full_shape, "x"), size, blocks,
         table.concat(sizes, " + "), t)
   end
   local at = 0
   for o = 0, outer - 1 do
      local first = 0 -- the block's first index along dim
      for k = 1, blocks do
         local piece = sizes[k] / t
         fn(at, (o * size + first + r * piece) * inner, piece * inner)
         at = at + piece * inner
         first = first + sizes[k]
      end
   end
end

-- Copies TP rank r's shard of spec (a TP-sharded spec: tp, full_shape) out of the full tensor
-- `full` (float*) into out (float*).
function tp.slice(full, spec, t, r, out)
   tp.runs(spec.full_shape, spec.tp, t, r, function(l, f, n)
      ffi.copy(out + l, full + f, 4 * n)
   end)
end

-- Copies TP rank r's shard `part` (float*) of spec into its place in the full tensor (float*).
function tp.place(part, spec, t, r, full)
   tp.runs(spec.full_shape, spec.tp, t, r, function(l, f, n)
      ffi.copy(full + f, part + l, 4 * n)
   end)
end

-- The shape of spec in the tp 1 model: its full_shape without the vocabulary's padding rows
-- (tp.rows), or its own shape when it is not TP-sharded.
function tp.model_shape(spec)
   if not spec.tp then return spec.shape end
   local shape = { unpack(spec.full_shape) }
   if spec.tp.rows then shape[1] = spec.tp.rows end
   return shape
end

-- Copies TP rank r's shard of spec out of `model` (float*: the tensor of the tp 1 model, of
-- tp.model_shape(spec)) into out (float*), the padding rows 0.
function tp.from_model(model, spec, t, r, out)
   local n, real = numel(spec.full_shape), numel(tp.model_shape(spec))
   local full = ffi.new("float[?]", n) -- zero-filled: the padding rows
   ffi.copy(full, model, 4 * real)
   tp.slice(full, spec, t, r, out)
end

-- Replaces, in tensors (ddp:params_on(0)'s list on DP rank 0: { name, shape, data }), every
-- TP-sharded parameter of ddp.specs by the full tensor of the tp 1 model (tp.model_shape: the
-- vocabulary's padding trimmed), on world rank 0 (TP rank 0 of DP rank 0), keyed by the same
-- name. Collective over the TP group of DP rank 0 (an all-gather per sharded parameter); other
-- ranks leave tensors as they are.
function tp.gather_full(ddp, g, tensors)
   if g.dp_rank ~= 0 then return tensors end
   local by_name = {}
   for i, x in ipairs(tensors) do by_name[x.name] = i end
   for _, spec in ipairs(ddp.specs) do
      local i = by_name[spec.name]
      if spec.tp and i then
         local n = numel(spec.shape)
         local all = ffi.new("float[?]", n * g.size)
         ffi.copy(all + g.rank * n, tensors[i].data, 4 * n)
         tp.allgather(g, nil, all, n * g.size, "the shards of " .. spec.name)
         if g.rank == 0 then
            local full = ffi.new("float[?]", numel(spec.full_shape))
            for r = 0, g.size - 1 do tp.place(all + r * n, spec, g.size, r, full) end
            tensors[i] = { name = spec.name, shape = tp.model_shape(spec), data = full }
         end
      end
   end
   return tensors
end

return tp
