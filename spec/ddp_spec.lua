-- ddp_spec.lua: buffers on one rank: views by name, groups, ownership, options and errors.
local lw = require("lwopt")

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

   it("picks the layout from the mode", function()
      assert.equal("legacy", lw.ddp.new(tiny(), lw.comm.self(), { mode = "legacy" }).layout.algorithm)
      assert.equal("default",
         lw.ddp.new(tiny(), lw.comm.self(), { mode = "replicated" }).layout.algorithm)
      assert.equal("lpt",
         lw.ddp.new(tiny(), lw.comm.self(), { algorithm = "lpt" }).layout.algorithm)
   end)

   it("names bad options and unknown parameters", function()
      local c = lw.comm.self()
      assert.has_error(function() lw.ddp.new(tiny(), c, { mode = "zero" }) end,
         "lw.ddp.new: unknown mode 'zero' (layerwise, legacy or replicated)")
      assert.has_error(function() lw.ddp.new(tiny(), c, { overlapp = true }) end,
         "lw.ddp.new: unknown option 'overlapp'")
      assert.has_error(function() lw.ddp.new(tiny(), c, { mode = "legacy", algorithm = "lpt" }) end,
         "lw.ddp.new: mode 'legacy' fixes the layout; algorithm and adamw_layout are for mode "
         .. "'layerwise'")
      local wrong = lw.layout.compute(tiny(), { dp = 2 })
      assert.has_error(function() lw.ddp.new(tiny(), c, { layout = wrong }) end,
         "lw.ddp.new: buffers: the layout is for dp 2 but the communicator has 1 ranks")
      local d = lw.ddp.new(tiny(), c)
      assert.has_error(function() d:param("nope") end, "ddp: no parameter named 'nope'")
      d:grad_ready("ln_f.weight")
      assert.has_error(function() d:grad_ready("ln_f.weight") end,
         "ddp:grad_ready: buffers: gradient of 'ln_f.weight' reported ready twice in one step")
   end)
end)
