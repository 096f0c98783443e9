-- tp_slices.lua: where a tensor-parallel rank's local tensor sits in the full one (issue 17), for
-- checkpoints that are keyed by the full tensor whatever TP size wrote them. A TP-sharded
-- parameter's spec carries tp = { dim = 0|1, blocks = b }: along dimension dim (0: rows, 1:
-- columns) the full tensor is b equal consecutive blocks, each split into t equal contiguous
-- pieces, and TP rank r's local tensor is piece r of every block, in block order (b = 3 for a
-- fused QKV weight laid out [Q; K; V]). Both tensors are row-major, so the local tensor is a
-- list of runs, each a contiguous stretch of the local and of the full tensor: one per block for
-- dim 0 (the piece's rows whole), one per row and block for dim 1.
local tp_slices = {}

local function numel(shape)
   local n = 1
   for _, d in ipairs(shape) do n = n * d end
   return n
end

-- Whether spec (with tp = { dim, blocks } and full_shape) splits into t pieces: the error in
-- words, or nil.
function tp_slices.check(spec, t)
   local tp = spec.tp
   if tp == nil then return nil end
   local full, dim, blocks = spec.full_shape, tp.dim, tp.blocks or 1
   if dim ~= 0 and dim ~= 1 or (dim == 1 and #full < 2) then
      return ("'%s': tp.dim %s is not a dimension it splits (0: rows, 1: columns of a matrix)")
         :format(spec.name, tostring(dim))
   end
   local extent = full[dim + 1]
   if extent % (blocks * t) ~= 0 then
      return ("'%s': its %d %s do not split into %d blocks of %d equal pieces"):format(spec.name,
         extent, dim == 0 and "rows" or "columns", blocks, t)
   end
   return nil
end

-- The runs of TP rank r of t in spec's full tensor: a list of { local offset, full offset,
-- length } in elements, in local order, covering the local tensor once. A spec without tp
-- (replicated) is one run, the whole tensor.
function tp_slices.runs(spec, t, r)
   local tp = spec.tp
   if tp == nil or t == 1 then
      local n = numel(spec.full_shape or spec.shape)
      return { { 0, 0, n } }
   end
   local bad = tp_slices.check(spec, t)
   if bad then error("lw.tp_slices: " .. bad, 2) end
   local full, blocks = spec.full_shape, tp.blocks or 1
   local rows = full[1]
   local cols = numel(full) / rows -- a 1-D tensor is rows of one element
   local out, at = {}, 0
   if tp.dim == 0 then
      local block, piece = rows / blocks, rows / blocks / t
      for b = 0, blocks - 1 do
         out[#out + 1] = { at, (b * block + r * piece) * cols, piece * cols }
         at = at + piece * cols
      end
   else
      local block, piece = cols / blocks, cols / blocks / t
      for row = 0, rows - 1 do
         for b = 0, blocks - 1 do
            out[#out + 1] = { at, row * cols + b * block + r * piece, piece }
            at = at + piece
         end
      end
   end
   return out
end

-- Copies local elements [lo, hi) of TP rank r's tensor (src[i - lo] holding local element i)
-- into their places in full (a float array of the full tensor), or, with to_local, the other
-- way: full's elements into dst[i - lo]. Returns how many elements it copied (hi - lo).
local function move(runs, lo, hi, local_array, full, to_local)
   local moved = 0
   for _, run in ipairs(runs) do
      local l0, f0, n = run[1], run[2], run[3]
      local a, b = math.max(lo, l0), math.min(hi, l0 + n)
      for i = a, b - 1 do
         if to_local then
            local_array[i - lo] = full[f0 + i - l0]
         else
            full[f0 + i - l0] = local_array[i - lo]
         end
      end
      if b > a then moved = moved + (b - a) end
   end
   return moved
end

-- Scatters src (local elements [lo, hi) of TP rank r of t) into full; marks them in seen (a
-- byte array of the full tensor's size) when given. Returns the count.
function tp_slices.to_full(spec, t, r, src, lo, hi, full, seen)
   local runs = tp_slices.runs(spec, t, r)
   if seen then
      for _, run in ipairs(runs) do
         local l0, f0, n = run[1], run[2], run[3]
         for i = math.max(lo, l0), math.min(hi, l0 + n) - 1 do seen[f0 + i - l0] = 1 end
      end
   end
   return move(runs, lo, hi, src, full, false)
end

-- Gathers local elements [lo, hi) of TP rank r of t from full into dst[0 .. hi - lo); with seen,
-- returns how many of them seen marks (the rest were never written), else the count.
function tp_slices.from_full(spec, t, r, full, lo, hi, dst, seen)
   local runs = tp_slices.runs(spec, t, r)
   local moved = move(runs, lo, hi, dst, full, true)
   if seen == nil then return moved end
   local marked = 0
   for _, run in ipairs(runs) do
      local l0, f0, n = run[1], run[2], run[3]
      for i = math.max(lo, l0), math.min(hi, l0 + n) - 1 do marked = marked + seen[f0 + i - l0] end
   end
   return marked
end

return tp_slices
