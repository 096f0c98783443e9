-- bench/layout.lua: padding, balance and speed of the whole-matrix layouts (the shard-aligned
-- ones and packed) on real model shapes. Run: bin/lwopt run bench/layout.lua (make bench).
-- Prints, per model, dp, bucket setting and algorithm: Muon padding overhead, the Muon bytes on
-- the wire per step over their unpadded minimum, numel imbalance, cost imbalance, cost
-- imbalance over its lower bound, and the time one layout takes (median of repeated runs).
local lw = require("lwopt")

-- GPT-2's and LLaMA's shapes as lw.models declares them (fused QKV weights, which the cost
-- layout costs as their Q, K and V; SwiGLU's gate and up rows in one fc), the MoE a LLaMA with
-- 64 SwiGLU experts in every layer.
local function llama(cfg) return lw.models.specs("llama", cfg) end
local models = {
   { "GPT-2 124M", lw.arch.gpt{ n_layer = 12, n_embd = 768, n_head = 12 } },
   { "GPT-2 350M", lw.arch.gpt{ n_layer = 24, n_embd = 1024, n_head = 16 } },
   { "GPT-2 1.5B", lw.arch.gpt{ n_layer = 48, n_embd = 1600, n_head = 25 } },
   { "LLaMA 1B", llama{ n_layer = 16, n_embd = 2048, n_head = 32, n_kv_head = 8,
      mlp_hidden = 8192, vocab = 128256, tied = true } },
   { "LLaMA 8B", llama{ n_layer = 32, n_embd = 4096, n_head = 32, n_kv_head = 8,
      mlp_hidden = 14336, vocab = 128256 } },
   { "MoE 64x", llama{ n_layer = 16, n_embd = 2048, n_head = 16, n_expert = 64,
      expert_hidden = 1024, vocab = 50304 } },
}
local dps = { 2, 4, 8, 16, 32, 64, 256 }
local algorithms = { "cost", "lpt", "size_matching", "packed" }
local buckets = { { "none", nil }, { "40M", 40e6 } }

-- Median seconds of one layout computation, repeating until about 0.05 s has passed.
local function time_layout(specs, opts)
   local samples, spent = {}, 0
   while spent < 0.05 or #samples < 3 do
      local t0 = os.clock()
      lw.layout.compute(specs, opts)
      local dt = os.clock() - t0
      samples[#samples + 1] = dt
      spent = spent + dt
   end
   table.sort(samples)
   return samples[math.ceil(#samples / 2)]
end

print("| model | params | dp | bucket | algorithm | Muon padding | wire / min | numel imb. "
   .. "| cost imb. | cost / bound | time ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for _, model in ipairs(models) do
   local name, specs = model[1], lw.route(model[2])
   local total = lw.arch.numel(specs)
   for _, dp in ipairs(dps) do
      for _, bucket in ipairs(buckets) do
         for _, algorithm in ipairs(algorithms) do
            local opts = { dp = dp, expert_dp = dp, bucket_size = bucket[2],
               algorithm = algorithm }
            local layout = lw.layout.compute(specs, opts)
            assert(layout:check())
            local s = layout:stats()
            -- every element of a Muon buffer, padding included, is reduce-scattered and
            -- all-gathered once a step: the wire carries buffer / real elements of the minimum
            print(string.format(
               "| %s | %.2fB | %d | %s | %s | %.2f%% | %.4f | %.3f | %.3f | %.3f | %.2f |",
               name, total / 1e9, dp, bucket[1], algorithm, 100 * s.muon_overhead,
               s.muon_buffer_numel / s.muon_numel, s.numel_imbalance, s.cost_imbalance,
               s.cost_imbalance / s.cost_imbalance_bound, 1000 * time_layout(specs, opts)))
         end
      end
   end
end
