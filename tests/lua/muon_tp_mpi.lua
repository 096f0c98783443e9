-- muon_tp_mpi.lua: Muon's TP modes through the Lua API (lw.optim.new{ tp_comm, muon = { tp_mode,
-- split_qkv } }), under mpirun (ctest: 2 ranks): the world is one TP group, each rank holding
-- its shards of a column-parallel, a row-parallel and a fused QKV weight (specs' tp and qkv
-- fields) and a replicated norm gain. After 2 steps duplicated and distributed equal a
-- one-rank run of the full model within 1e-4 of the update (test_muon_tp.c derives 1e-3 as the
-- bound; these runs differ by ~1e-6), blockwise differs from it, and the gradient norm is the
-- full model's. Prints "N passed, M failed"; exits non-zero on a failure.
local lw = require("lwopt")

lw.comm.run(function()
   local comm = lw.comm.init()
   local t, r = comm.size, comm.rank
   -- full shapes; tp: how the shards are cut (piece r of each of `blocks` blocks along dim)
   local params = {
      { name = "up", rows = 8 * t, cols = 12, tp = { dim = 0 } },
      { name = "down", rows = 12, cols = 6 * t, tp = { dim = 1 } },
      { name = "qkv", rows = 12 * t, cols = 8, tp = { dim = 0, blocks = 3 }, rows_qkv = 4 },
      { name = "ln", rows = 12, cols = 1 },
   }
   local function full_index(p, i, j) -- 0-based local (i, j) to the full 1-based index
      if p.tp then
         local blocks = p.tp.blocks or 1
         local size = p.tp.dim == 0 and p.rows or p.cols
         local block, k = size / blocks, p.tp.dim == 0 and i or j
         local piece = block / t
         local f = math.floor(k / piece) * block + r * piece + k % piece
         if p.tp.dim == 0 then i = f else j = f end
      end
      return i * p.cols + j + 1
   end
   local function local_shape(p)
      local rows, cols = p.rows, p.cols
      if p.tp and p.tp.dim == 0 then rows = rows / t elseif p.tp then cols = cols / t end
      return rows, cols
   end
   local function spec(p, full)
      local rows, cols = p.rows, p.cols
      if not full then rows, cols = local_shape(p) end
      local s = { name = p.name, shape = p.cols > 1 and { rows, cols } or { rows },
                  role = p.cols > 1 and "matrix" or "norm" }
      if not full then s.tp = p.tp end
      if p.rows_qkv then
         local q = full and p.rows_qkv * t or p.rows_qkv
         s.qkv = { groups = 1, rows = { q, q, q } }
      end
      return s
   end
   local function value(p, f, step) return math.sin(1.7 * f + 0.3 * #p.name + step) end

   local function train(full, tp, muon)
      local specs = {}
      for i, p in ipairs(params) do specs[i] = spec(p, full) end
      local d = lw.ddp.new(specs, lw.comm.self())
      local opt = lw.optim.new(d, { lr = 0.02, tp_comm = tp, muon = muon })
      local function each(fn)
         for _, p in ipairs(params) do
            local rows, cols = p.rows, p.cols
            if not full then rows, cols = local_shape(p) end
            fn(p, function(k)
               local i, j = math.floor((k - 1) / cols), (k - 1) % cols
               return full and k or full_index(p, i, j)
            end)
         end
      end
      each(function(p, at)
         d:param(p.name):copy(function(k) return 0.1 * value(p, at(k), 0) end)
      end)
      local norm
      for step = 1, 2 do
         d:zero_grad()
         each(function(p, at)
            d:grad(p.name):copy(function(k) return value(p, at(k), step) end)
            d:grad_ready(p.name)
         end)
         local res = opt:step()
         norm = norm or res.grad_norm
      end
      d:finish_param_sync()
      return d, norm
   end

   local reference, ref_norm = train(true, nil, nil)
   local passed, failed = 0, 0
   local function check(ok, what)
      if ok then passed = passed + 1 else
         failed = failed + 1
         io.stderr:write(("rank %d: %s\n"):format(r, what))
      end
   end
   -- the largest difference from the reference's slice, over the largest update
   local function differs(d, p)
      local mine, full = d:param(p.name):totable(), reference:param(p.name):totable()
      local _, cols = local_shape(p)
      local diff, moved = 0, 0
      for k, v in ipairs(mine) do
         local f = full_index(p, math.floor((k - 1) / cols), (k - 1) % cols)
         diff = math.max(diff, math.abs(v - full[f]))
         moved = math.max(moved, math.abs(full[f] - 0.1 * value(p, f, 0)))
      end
      return diff / moved
   end
   for _, mode in ipairs({ "duplicated", "distributed", "blockwise" }) do
      local d, norm = train(false, comm, { tp_mode = mode })
      check(math.abs(norm - ref_norm) <= 1e-9 * ref_norm, mode .. ": gradient norm " .. norm
         .. ", full model's " .. ref_norm)
      for _, p in ipairs(params) do
         local x = differs(d, p)
         if mode ~= "blockwise" or not p.tp or t == 1 then
            check(x <= 1e-4,
               ("%s: '%s' differs from the full model's by %g"):format(mode, p.name, x))
         else
            check(x > 1e-2, ("blockwise: '%s' equals the full model's (%g)"):format(p.name, x))
         end
      end
   end
   passed = comm:allreduce({ passed })[1]
   failed = comm:allreduce({ failed })[1]
   if r == 0 then
      print(("muon_tp_mpi at %d ranks: %d passed, %d failed"):format(t, passed, failed))
   end
   if failed > 0 then os.exit(1) end
end)
