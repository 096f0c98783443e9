-- mfu.lua: model FLOPs utilisation, the share of the devices' peak a run's tokens per second
-- stand for (PaLM's definition, Chowdhery et al. 2022, appendix B, as nanoGPT and llm.c print
-- it): a token costs 6 FLOPs per parameter that multiplies it (2 in the forward pass, 4 in the
-- backward) plus 12 x layers x width x sequence for the attention's scores and weighted sums;
-- lookup tables (positions, an untied token embedding) and the experts a token is not routed
-- to multiply nothing. The peak is the device's dense bf16 tensor rate from its
-- datasheet (the precision these runs' matrix products take on a GPU); a device not listed has
-- no MFU unless the run gives its peak (--peak-tflops).
local mfu = {}

-- Dense bf16 peaks (FLOP/s) of the GPUs lwopt knows, by a pattern of lw_device_info's name.
-- NVIDIA's datasheets: H100 SXM and H200 989.4 TFLOP/s, H100 PCIe 756, A100 312, L40S 362.
local PEAKS = {
   { "H200", 989.4e12 }, { "H100 PCIe", 756e12 }, { "H100", 989.4e12 }, { "GH200", 989.4e12 },
   { "A100", 312e12 }, { "L40S", 362.05e12 },
}

-- The peak of the device named `name` (lw_device_info.name), or nil when unknown.
function mfu.peak(name)
   for _, p in ipairs(PEAKS) do
      if name:find(p[1], 1, true) then return p[2] end
   end
   return nil
end

-- FLOPs per token trained of a model of these parameter specs (the whole model's: every TP
-- and EP rank's part), n_layer layers of width n_embd over sequences of t: 6 per parameter
-- a token meets (an expert's times topk / n_expert; none for position tables) and 12 n_layer
-- n_embd t for the attention.
function mfu.flops_per_token(specs, m)
   local n = 0
   for _, s in ipairs(specs) do
      local k = 1
      for _, d in ipairs(s.shape) do k = k * d end
      if s.expert then k = k * m.topk / m.n_expert end
      if s.role ~= "embedding" or s.shared_embedding then
         n = n + k
      end
   end
   return 6 * n + 12 * m.n_layer * m.n_embd * m.t
end

-- The run's MFU from its tokens per second over all ranks, or nil without a peak: peak is the
-- FLOP/s of one device, devices how many the ranks run on.
function mfu.of(tokens_per_s, flops_per_token, peak, devices)
   if peak == nil then return nil end
   return tokens_per_s * flops_per_token / (peak * devices)
end

return mfu
