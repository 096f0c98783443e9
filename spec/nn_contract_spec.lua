-- nn_contract_spec.lua: what every lw.nn module promises: its shape arguments, the activation
-- bytes it holds, the order of the hooks around parameters and gradients, its device, and
-- activations moved only through the device's copies.
local ffi = require("ffi")
local lw = require("lwopt")
local nn = lw.nn
local h = require("nn_helpers")
local bind, forward_backward, randoms = h.bind, h.forward_backward, h.randoms

describe("lw.nn's module contract", function()
   it("names the shape arguments of every module but GPT's loss API", function()
      for _, name in ipairs({ "Linear", "LayerNorm", "GELU", "MLP", "MoE", "RMSNorm", "ReLU2",
         "SwiGLU" }) do
         assert.same({ "n" }, nn[name].shape_args, name)
      end
      for _, name in ipairs({ "Embedding", "CausalSelfAttention", "Block", "Rotary", "QKNorm" }) do
         assert.same({ "b", "t" }, nn[name].shape_args, name)
      end
      assert.is_function(nn.activation_bytes)
      assert.is_number(nn.activation_bytes())
      assert.equal(nn.Module, getmetatable(nn.Linear).__index)
   end)

   it("holds a backward's intermediate gradients once per kind of module, not once per layer",
      function()
      -- what a backward adds to the activations held, once the kinds' buffers exist: the same
      -- for 3 layers as for 4
      local function backward_bytes(layers)
         local m = nn.GPT.new{ n_layer = layers, n_embd = 16, n_head = 2, vocab = 11,
            seq_len = 7, bias = true }
         bind(m)
         local tokens = ffi.new("int32_t[14]")
         for i = 0, 13 do tokens[i] = (i * 5 + 2) % 11 end
         collectgarbage("collect")
         collectgarbage("stop")
         m:forward(tokens, tokens, 2, 7)
         local after_forward = nn.activation_bytes()
         m:backward(1)
         local added = nn.activation_bytes() - after_forward
         collectgarbage("restart")
         return added
      end
      backward_bytes(2) -- the kinds' buffers made (unless earlier models made them)
      local three, four = backward_bytes(3), backward_bytes(4)
      assert.equal(three, four) -- the model's own input gradients alone
   end)

   it("recomputes GELU's output in backward when asked: the same loss and gradients, one "
      .. "[n, hidden] activation less a layer", function()
      local kept, held_kept = forward_backward{ recompute_gelu = false }
      local again, held_again = forward_backward{ recompute_gelu = true }
      assert.same(kept, again)
      -- 3 layers of 14 rows x 64 hidden floats not held (one transient for all, maybe made
      -- before)
      assert.is_true(held_kept - held_again >= 2 * 14 * 64 * 4, held_kept .. " " .. held_again)
   end)

   it("counts only the activation buffers it holds: one outgrown again and again is replaced a "
      .. "few times and the old ones freed", function()
      local m = nn.Linear.new("grow.", 4, 4, false)
      collectgarbage("collect")
      local before = nn.activation_bytes()
      local replaced, last = 0, nil
      for n = 1, 2000 do
         local p = m:buffer("rows", n)
         if p ~= last then replaced, last = replaced + 1, p end
      end
      collectgarbage("collect")
      collectgarbage("collect")
      local held = nn.activation_bytes() - before
      assert.is_true(replaced <= 20, tostring(replaced))
      assert.is_true(held >= 4 * 2000 and held <= 4 * 3000, tostring(held))
   end)

   -- hooks that record every call; parameters and gradients in plain arrays
   local function recording_hooks(module)
      local events, store = {}, {}
      for _, s in ipairs(module:parameters()) do
         local numel = 1
         for _, dim in ipairs(s.shape) do numel = numel * dim end
         store[s.name] = { randoms(numel, 11), ffi.new("float[?]", numel) }
      end
      module:bind(nil, {
         acquire = function(name, pass, reuse)
            events[#events + 1] = ("acquire %s %s%s"):format(name, pass, reuse and " reuse" or "")
            return store[name][1], pass == "backward" and store[name][2] or nil
         end,
         release = function(name) events[#events + 1] = "release " .. name end,
         ready = function(name) events[#events + 1] = "ready " .. name end,
      })
      return events
   end

   it("binds every module under a model to its device, those without parameters too", function()
      local m = nn.MLP.new("m.", 4, false)
      local d = bind(m)
      assert.equal(d.device, m.gelu.device)
      assert.equal(d.stream, m.gelu.stream)
   end)

   it("acquires a module's parameters around its kernel and reports gradients after", function()
      local m = nn.Linear.new("l.", 3, 2, true)
      local events = recording_hooks(m)
      local x = randoms(6, 3)
      m:forward(x, 2)
      m:backward(x, randoms(4, 5), ffi.new("float[6]"), 2)
      assert.same({ "acquire l.weight forward", "acquire l.bias forward", "release l.weight",
         "release l.bias", "acquire l.weight backward", "acquire l.bias backward",
         "release l.weight", "release l.bias", "ready l.weight", "ready l.bias" }, events)
   end)

   it("reports each gradient of a GPT once, in backprop order; a tied head is a reuse", function()
      local m = nn.GPT.new{ n_layer = 2, n_embd = 8, n_head = 2, vocab = 11, seq_len = 4 }
      local events = recording_hooks(m)
      local tokens = ffi.new("int32_t[4]", { 1, 2, 3, 4 })
      m:forward(tokens, tokens, 1, 4)
      m:backward(1)
      local ready, wte = {}, {}
      for _, e in ipairs(events) do
         local name = e:match("^ready (%S+)$")
         if name then ready[#ready + 1] = name end
         if e:match("^acquire wte%.weight") then wte[#wte + 1] = e end
      end
      local want = { "ln_f.weight" }
      for i = 1, 0, -1 do
         for _, p in ipairs({ "mlp.proj", "mlp.fc", "ln_2", "attn.proj", "attn.qkv", "ln_1" }) do
            want[#want + 1] = ("h.%d.%s.weight"):format(i, p)
         end
      end
      want[#want + 1] = "wpe.weight"
      want[#want + 1] = "wte.weight"
      assert.same(want, ready)
      assert.same({ "acquire wte.weight forward", "acquire wte.weight forward reuse",
         "acquire wte.weight backward reuse", "acquire wte.weight backward" }, wte)
   end)

   it("gives every expert its turn in the hooks, in backprop order, tokens or not", function()
      local m = nn.GPT.new{ n_layer = 1, n_embd = 8, n_head = 2, vocab = 11, seq_len = 4,
         n_expert = 6, topk = 1, shared_expert = true }
      local events = recording_hooks(m)
      local tokens = ffi.new("int32_t[4]", { 1, 2, 3, 4 })
      m:forward(tokens, tokens, 1, 4)
      local counts = m:expert_counts()[1]
      local idle = 0
      for _, count in ipairs(counts) do idle = idle + (count == 0 and 1 or 0) end
      assert.is_true(idle >= 2) -- 4 tokens, 6 experts: some get none
      assert.equal(idle, m.blocks[1].moe.idle)
      m:backward(1)
      local acquired, ready = {}, {}
      for _, e in ipairs(events) do
         local name = e:match("^acquire (h%.0%.moe%.%S+) forward$")
         if name then acquired[#acquired + 1] = name end
         name = e:match("^ready (h%.0%.moe%.%S+)$")
         if name then ready[#ready + 1] = name end
      end
      local want_acquired = { "h.0.moe.router.weight" }
      for e = 0, 5 do
         want_acquired[#want_acquired + 1] = ("h.0.moe.experts.%d.fc.weight"):format(e)
         want_acquired[#want_acquired + 1] = ("h.0.moe.experts.%d.proj.weight"):format(e)
      end
      want_acquired[#want_acquired + 1] = "h.0.moe.shared.fc.weight"
      want_acquired[#want_acquired + 1] = "h.0.moe.shared.proj.weight"
      -- backprop order: the shared expert, the experts from the last (proj before fc), router
      local want_ready = { "h.0.moe.shared.proj.weight", "h.0.moe.shared.fc.weight" }
      for e = 5, 0, -1 do
         want_ready[#want_ready + 1] = ("h.0.moe.experts.%d.proj.weight"):format(e)
         want_ready[#want_ready + 1] = ("h.0.moe.experts.%d.fc.weight"):format(e)
      end
      want_ready[#want_ready + 1] = "h.0.moe.router.weight"
      assert.same(want_acquired, acquired)
      assert.same(want_ready, ready)
   end)
end)

describe("lw.nn on a device's memory", function()
   -- Activations live where the model is bound (a GPU's memory on CUDA): a module may move
   -- them only through lw.h's copies on its stream. A host memcpy (ffi.copy) or memset
   -- (ffi.fill) on one crashes on a GPU, and nothing on the CPU would notice, so this reads the
   -- modules' source: no ffi.copy anywhere, and ffi.fill only on GPT's host staging arrays.
   it("moves activations only through the device's copies", function()
      for _, name in ipairs({ "module", "linear", "embedding", "layernorm", "gelu", "attention",
         "mlp", "moe", "block", "gpt" }) do
         local f = assert(io.open("lua/lwopt/nn/" .. name .. ".lua"))
         local text = f:read("*a")
         f:close()
         assert.is_nil(text:find("ffi.copy(", 1, true), name .. ".lua uses ffi.copy")
         for line in text:gmatch("[^\n]*ffi%.fill%([^\n]*") do
            assert.is_truthy(name == "gpt" and line:find("targets", 1, true),
               name .. ".lua fills device memory from the host: " .. line)
         end
      end
   end)
end)
