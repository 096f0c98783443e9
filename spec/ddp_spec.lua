-- ddp_spec.lua: buffers on one rank: views by name, groups, ownership, options and errors.
local ffi = require("ffi")
local lw = require("lwopt")
local helpers = require("helpers")

local function tiny() return lw.arch.gpt{ n_layer = 2, n_embd = 32, n_head = 2, vocab = 64, seq_len = 16 } end

describe("lw.ddp.new", function()
   it("gives parameter and gradient views into the flat buffers", function()
      local d = lw.ddp.new(tiny(), lw.comm.self(), { bucket_size = 4000 })
      local w = d:param("h.0.attn.qkv.weight")
      assert.same({ 96, 32 }, w.shape)
      w:fill(0.5)
      assert.equal(0.5, d:param("h.0.attn.qkv.weight"):at(96 * 32))
      assert.equal(0, d:grad("h.0.attn.qkv.weight"):sum())
      local start, count = d:owned("h.0.attn.qkv.weight")
      assert.same({ 0, 96 * 32 }, { start, count })
      assert.equal("layerwise", d.mode)
   end)

   it("lives on the CPU device unless told otherwise, and names a device it cannot have", function()
      local d = lw.ddp.new(tiny(), lw.comm.self())
      assert.equal("cpu", ffi.string(require("lwopt.C").lib.lw_device_name(d.device)))
      assert.is_true(d.host)
      assert.has_error(function() lw.ddp.new(tiny(), lw.comm.self(), { device = "tpu" }) end,
         "lw.ddp.new: device: unknown device 'tpu' (cpu, cuda or cuda:N)")
   end)

   it("says why it cannot have a GPU on a machine without one", function()
      if lw.has_cuda() then return pending("a GPU is here") end
      local ok, err = pcall(lw.ddp.new, tiny(), lw.comm.self(), { device = "cuda" })
      assert.is_false(ok)
      -- the library not built, or built and without a driver or a device
      assert.matches("^lw%.ddp%.new: device: CUDA is not available: ", err)
   end)

   it("takes device 'cuda' under a launcher as the rank's GPU, by its local rank", function()
      -- a child with a launcher's variables: ddp.device reads them (nothing starts MPI)
      local script = helpers.tempfile([[
package.path = "lua/?.lua;lua/?/init.lua;build/lua/?.lua;" .. package.path
local ok, err = pcall(require("lwopt").ddp.device, "cuda")
print(ok, err)
]])
      local clean = "env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_SIZE "
         .. "-u OMPI_COMM_WORLD_LOCAL_RANK -u MPI_LOCALRANKID -u MV2_COMM_WORLD_LOCAL_RANK "
         .. "-u PALS_LOCAL_RANKID -u SLURM_LOCALID PMI_RANK=1 "
      -- no machine has 64 GPUs: the error names the local rank and the GPU it stands for
      local out = helpers.sh(clean .. "SLURM_LOCALID=63 luajit " .. script)
      assert.matches("false\tlw.ddp.new: device 'cuda' is cuda:63 for local rank 63 (one GPU per "
         .. "rank): device: ", out, 1, true)
      out = helpers.sh(clean .. "luajit " .. script)
      assert.matches("device 'cuda' is this rank's GPU by its local rank, but the launcher set "
         .. "none", out, 1, true)
      os.remove(script)
   end)

   it("needs no device communicator on the CPU, and no GPU for one elsewhere", function()
      local d = lw.ddp.new(tiny(), lw.comm.self())
      assert.is_nil(d.device_comm)
      assert.is_true(d.comm:reaches(d.device))
      assert.has_error(function() lw.comm.device(lw.comm.self(), d.device) end,
         "lw.comm.device: comm: cpu has no communicator of its own: every communicator already "
         .. "reaches host memory (use the 'self' communicator itself)")
   end)

   it("reads and writes parameters through explicit copies, at every ZeRO level", function()
      for _, zero in ipairs({ 1, 2, 3 }) do
         local d = lw.ddp.new(tiny(), lw.comm.self(), { bucket_size = 5000, zero = zero })
         d:write_param("h.1.mlp.fc.weight", function(i) return 0.001 * i end)
         local w = d:read_param("h.1.mlp.fc.weight")
         assert.same({ 128, 32 }, w.shape)
         assert.near(0.001 * 5, w:at(5), 1e-7)
         -- a copy: writing it changes nothing in the buffers
         w:fill(7)
         assert.near(0.001 * 5, d:read_param("h.1.mlp.fc.weight"):at(5), 1e-7)
         -- the device copies a checkpoint uses: host -> device -> host
         local host = ffi.new("float[3]", { 1, 2, 3 })
         local dev = d:acquire("h.0.ln_1.weight", "forward", true)
         d:from_host(dev, host, 3)
         local back = d:to_host(dev, 3)
         d:release("h.0.ln_1.weight")
         assert.same({ 1, 2, 3 }, { back[0], back[1], back[2] })
      end
   end)

   it("holds bf16 parameters in half the bytes, read and written as fp32 at every ZeRO level",
      function()
      for _, zero in ipairs({ 1, 2, 3 }) do
         local d = lw.ddp.new(tiny(), lw.comm.self(), { bucket_size = 5000, zero = zero,
            param_dtype = "bf16", grad_dtype = "bf16" })
         assert.equal("bf16", d.param_dtype)
         assert.equal("bf16", d.grad_dtype)
         -- a view exists only while its group is held (acquired), as at ZeRO-3
         assert.has_error(function() d:param("h.1.mlp.fc.weight") end)
         local f = lw.ddp.new(tiny(), lw.comm.self(), { bucket_size = 5000, zero = zero })
         local h = lw.ddp.new(tiny(), lw.comm.self(), { bucket_size = 5000, zero = zero,
            param_dtype = "bf16" })
         assert.equal("f32", f.param_dtype)
         -- the same fp32 gradients: the difference is half the parameters' bytes
         local grads = f:memory().grads
         assert.equal((f:memory().arrays - grads) / 2, h:memory().arrays - grads)
         -- 1 + 2^-8 lies halfway between two bf16 values: rounded to the even one, 1
         d:write_param("h.1.mlp.fc.weight", function(i) return i == 1 and 1 + 2 ^ -8 or 0.5 end)
         local w = d:read_param("h.1.mlp.fc.weight")
         assert.equal(1, w:at(1))
         assert.equal(0.5, w:at(2))
      end
   end)

   it("names a dtype it does not hold", function()
      assert.has_error(function()
         lw.ddp.new(tiny(), lw.comm.self(), { param_dtype = "fp16" })
      end, "lw.ddp.new: param_dtype must be 'bf16' or 'fp32', got 'fp16'")
      local mixed = tiny()
      mixed[1].dtype = "bf16"
      local ok, err = pcall(lw.ddp.new, mixed, lw.comm.self())
      assert.is_false(ok)
      assert.matches("every parameter of one set of buffers has the same dtype", err, 1, true)
   end)

   it("numbers groups in forward order", function()
      local d = lw.ddp.new(tiny(), lw.comm.self(), { bucket_size = 4000 })
      assert.is_true(d:num_groups() > 2)
      assert.is_true(d:group_of("h.0.attn.qkv.weight") <= d:group_of("h.1.mlp.proj.weight"))
      d:start_param_sync()
      for g = 1, d:num_groups() do d:finish_param_sync(g) end
   end)

   it("turns both overlaps off with overlap = false, or one of them", function()
      assert.has_no_error(function() lw.ddp.new(tiny(), lw.comm.self(), { overlap = false }) end)
      assert.has_no_error(function()
         lw.ddp.new(tiny(), lw.comm.self(), { overlap = false, overlap_param = true })
      end)
   end)

   it("checks the ZeRO level and the sharding against the mode", function()
      local function err(opts)
         local ok, e = pcall(lw.ddp.new, tiny(), lw.comm.self(), opts)
         assert.is_false(ok)
         return e
      end
      assert.matches("zero must be 1, 2 or 3, got 0", err({ zero = 0 }), 1, true)
      assert.matches("zero 2 shards gradients across ranks; mode 'legacy' keeps them whole",
         err({ zero = 2, mode = "legacy" }), 1, true)
      assert.matches("shard 'rows' is row-sharded FSDP: it needs zero 3, got zero 1",
         err({ shard = "rows" }), 1, true)
      assert.matches("algorithm 'lpt' is for shard 'aligned'",
         err({ shard = "rows", zero = 3, algorithm = "lpt" }), 1, true)
      assert.matches("unknown shard 'cols' (one of aligned, rows)", err({ shard = "cols" }), 1,
         true)
      assert.matches("zero 3 shards gradients and parameters across ranks; mode 'replicated' "
         .. "keeps them whole (use mode 'layerwise')", err({ zero = 3, mode = "replicated" }), 1,
         true)
      assert.matches("zero must be an integer, got 1.5", err({ zero = 1.5 }), 1, true)
      assert.matches("mode 'replicated' fixes the layout",
         err({ mode = "replicated", adamw_layout = "aligned" }), 1, true)
      assert.matches("unknown adamw_layout 'zero3' (one of distopt, aligned, default, legacy)",
         err({ adamw_layout = "zero3" }), 1, true)
      assert.matches("unknown algorithm 'greedy' (one of cost, lpt, size_matching, distopt, "
         .. "default, legacy, rows, packed)", err({ algorithm = "greedy" }), 1, true)
      -- packed: unequal shards, at every ZeRO level
      for zero = 1, 3 do
         local d = lw.ddp.new(tiny(), lw.comm.self(), { algorithm = "packed", zero = zero })
         assert.equal("packed", d.layout.buffers[#d.layout.buffers].algorithm)
      end
      -- at ZeRO-3 the buckets must hold the largest parameter (checked against the layout)
      assert.matches("at ZeRO-3 a bucket group is gathered whole, but bucket_size 1000 is "
         .. "smaller than 'wte.weight' (2048 elements)", err({ zero = 3, bucket_size = 1000 }), 1,
         true)
      local d = lw.ddp.new(tiny(), lw.comm.self(), { zero = 3, shard = "rows" })
      assert.equal("rows", d.layout.algorithm)
      assert.equal(3, d.zero)
   end)

   it("at ZeRO-3 holds a parameter only between acquire and release (or until evicted)",
      function()
      local d = lw.ddp.new(tiny(), lw.comm.self(), { zero = 3, bucket_size = 4096 })
      local ok, e = pcall(d.param, d, "h.1.mlp.fc.weight")
      assert.is_false(ok)
      assert.matches("'h.1.mlp.fc.weight' is not gathered", e, 1, true)
      d:with_param("h.1.mlp.fc.weight", function(t) t:fill(0.25) end)
      local w, g = d:acquire("h.1.mlp.fc.weight", "backward")
      assert.equal(0.25, w[5])
      assert.equal(0, g[5]) -- whole-gradient storage, zeroed
      d:release("h.1.mlp.fc.weight")
      local m = d:memory()
      assert.is_true(m.peak > m.arrays and m.peak <= m.arrays + m.budget)
      d:start_param_sync() -- drops what was gathered: the shard has the committed values
      d:with_param("h.1.mlp.fc.weight", function(t) assert.equal(0.25, t:at(7)) end)
   end)

   it("checks runtime choices without building anything (lw.ddp.check)", function()
      assert.is_true(lw.ddp.check({ zero = 3, shard = "rows" }))
      assert.is_true(lw.ddp.check({ mode = "legacy" }))
      assert.is_true(lw.ddp.check())
      local ok, why = lw.ddp.check({ zero = 2, mode = "legacy" })
      assert.is_false(ok)
      assert.equal("runtime: zero 2 shards gradients across ranks; mode 'legacy' keeps them "
         .. "whole (use mode 'layerwise')", why)
      ok, why = lw.ddp.check({ shard = "rows", zero = 3, algorithm = "lpt" })
      assert.is_false(ok)
      assert.equal("runtime: shard 'rows' lays the Muon matrices out by rows; algorithm 'lpt' is "
         .. "for shard 'aligned'", why)
      ok, why = lw.ddp.check({ mode = "fast" })
      assert.is_false(ok)
      assert.equal("unknown mode 'fast' (one of layerwise, legacy, replicated)", why)
   end)

   it("takes a layout computed before, whatever its algorithm options say", function()
      local given = lw.layout.compute(tiny(), { algorithm = "lpt" })
      local d = lw.ddp.new(tiny(), lw.comm.self(), { layout = given, algorithm = "cost" })
      assert.equal("lpt", d.layout.algorithm)
      local legacy = lw.layout.compute(tiny(), { algorithm = "legacy" })
      local ok, e = pcall(lw.ddp.new, tiny(), lw.comm.self(), { layout = legacy, zero = 2 })
      assert.is_false(ok)
      assert.matches("ZeRO-2 shards gradients across ranks, so it needs sharded buffers (the "
         .. "layer-wise mode), but buffer #1 has the unsharded 'legacy' layout", e, 1, true)
   end)

   it("picks the layout from the mode", function()
      assert.equal("legacy", lw.ddp.new(tiny(), lw.comm.self(), { mode = "legacy" }).layout.algorithm)
      assert.equal("default",
         lw.ddp.new(tiny(), lw.comm.self(), { mode = "replicated" }).layout.algorithm)
      assert.equal("lpt",
         lw.ddp.new(tiny(), lw.comm.self(), { algorithm = "lpt" }).layout.algorithm)
      local legacy = lw.ddp.new(tiny(), lw.comm.self(), { mode = "legacy" })
      assert.equal("legacy", legacy.layout.adamw_layout)
      assert.equal("legacy", legacy.mode)
      local aligned = lw.ddp.new(tiny(), lw.comm.self(), { algorithm = "lpt",
         adamw_layout = "aligned" })
      assert.equal("aligned", aligned.layout.adamw_layout)
      for _, buffer in ipairs(aligned.layout.buffers) do assert.equal("lpt", buffer.algorithm) end
   end)

   it("names bad options and unknown parameters", function()
      local c = lw.comm.self()
      assert.has_error(function() lw.ddp.new(tiny(), c, { mode = "zero" }) end,
         "lw.ddp.new: unknown mode 'zero' (one of layerwise, legacy, replicated)")
      assert.has_error(function() lw.ddp.new(tiny(), c, { overlapp = true }) end,
         "lw.ddp.new: unknown option 'overlapp'")
      assert.has_error(function() lw.ddp.new(tiny(), c, { mode = "legacy", algorithm = "lpt" }) end,
         "lw.ddp.new: runtime: mode 'legacy' fixes the layout; algorithm and adamw_layout are "
         .. "for mode 'layerwise'")
      local wrong = lw.layout.compute(tiny(), { dp = 2 })
      assert.has_error(function() lw.ddp.new(tiny(), c, { layout = wrong }) end,
         "lw.ddp.new: buffers: the layout is for dp 2 but the communicator has 1 rank")
      local d = lw.ddp.new(tiny(), c)
      assert.has_error(function() d:param("nope") end, "ddp: no parameter named 'nope'")
      d:grad_ready("ln_f.weight")
      assert.has_error(function() d:grad_ready("ln_f.weight") end,
         "ddp:grad_ready: buffers: gradient of 'ln_f.weight' reported ready twice in one step")
   end)
end)
