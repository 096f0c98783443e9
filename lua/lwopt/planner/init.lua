-- planner/init.lua: lw.stepmodel, a model of one training step's time for a layout: forward and
-- backward at the model's matmul rate; every bucket's reduce-scatter and all-gather on one link,
-- one collective at a time, overlapped with backward and forward in the order lw_buffers issues
-- them; then the optimizer (each rank's Newton-Schulz and element-wise updates) once the
-- gradients are reduced. It predicts and measures nothing; docs/layout.md ("Step-time model")
-- states the equations and what they leave out.
--
-- The planner is split by job: machines.lua (presets and checks), costs.lua (formulas),
-- predict.lua (the simulation), show.lua (the printed tables, loaded on first use). This module
-- gathers them as lw.stepmodel; lwopt loads it on first access to lw.stepmodel.
local machines = require("lwopt.planner.machines")
local costs = require("lwopt.planner.costs")
local predict = require("lwopt.planner.predict")

local stepmodel = {}

for _, part in ipairs({
   { machines, { "presets", "cpu_machine", "preset_names", "default_machine", "variable_models",
                 "machine" } },
   { costs, { "collective_time", "small_allreduce_time", "ns_steps", "ns_flops",
              "bytes_per_element", "muon_option_bytes", "attention_flops", "default_topk",
              "flops_per_token" } },
   { predict, { "predict", "compare_algorithms" } },
}) do
   for _, name in ipairs(part[2]) do stepmodel[name] = part[1][name] end
end

-- The printable tables (planner/show.lua): loaded on first use.
function stepmodel.table(...) return require("lwopt.planner.show").table(...) end
function stepmodel.compare(...) return require("lwopt.planner.show").compare(...) end
function stepmodel.compare_table(...) return require("lwopt.planner.show").compare_table(...) end

return stepmodel
