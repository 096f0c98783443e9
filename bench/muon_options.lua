-- muon_options.lua: what each of Muon's options (docs/algorithms.md section 6) adds to the
-- optimizer's step on the CPU, against plain Muon: the Muon seconds of one step (the step's
-- r.time.muon: momentum, Newton-Schulz and its rescalings, the step) over the recipe's GPT
-- shapes, one rank. Every variant has its own buffers and optimizer; they step interleaved,
-- round after round, in one job, and each keeps its best round, since this machine's speed moves
-- by tens of percent within minutes.
-- Usage: bin/lwopt run bench/muon_options.lua [--preset small|wide] [--rounds R]
local lw = require("lwopt")
local flags = require("lwopt.flags")

local v = assert(flags.parse(arg, {
   { "preset", { "small", "wide" }, "small", "the GPT's shapes: the recipe's small (6 x 256) or "
     .. "wide (6 x 1024)" },
   { "rounds", "int", 15, "rounds of one step per variant; the best is kept" },
}))
local SHAPES = { small = { n_layer = 6, n_embd = 256, n_head = 8 },
                 wide = { n_layer = 6, n_embd = 1024, n_head = 16 } }

-- the options on top of the library's defaults, in the order printed
local VARIANTS = {
   { "plain Muon (defaults)", {} },
   { "row_equilibrate", { row_equilibrate = true } },
   { "renormalize", { renormalize = true } },
   { "cautious_wd", { cautious_wd = true } },
   { "weight_decay_mode scaled", { weight_decay_mode = "scaled" } },
   { "coefficients nanochat", { coefficients = "nanochat" } },
   { "variant nanochat (all)", { variant = "nanochat" } },
}

local specs = lw.route(lw.arch.gpt(SHAPES[v.preset]))
local matrices = 0
for _, s in ipairs(specs) do
   if s.optimizer == "muon" then matrices = matrices + 1 end
end
local runs = {}
for i, variant in ipairs(VARIANTS) do
   local d = lw.ddp.new(specs, lw.comm.self(), { overlap = false })
   for _, s in ipairs(specs) do d:param(s.name):copy(function(k) return 0.02 * math.sin(k) end) end
   runs[i] = { d = d, opt = lw.optim.new(d, { lr = 1e-3, weight_decay = 0.1,
      muon = variant[2] }), best = math.huge }
end

for round = 1, v.rounds do
   for _, r in ipairs(runs) do
      r.d:zero_grad()
      for i = #specs, 1, -1 do
         r.d:grad(specs[i].name):copy(function(k) return math.sin(0.37 * k + i + round) end)
         r.d:grad_ready(specs[i].name)
      end
      local t = r.opt:step().time.muon
      if t < r.best then r.best = t end
   end
end

print(("GPT %s (%d layers x %d), %d Muon matrices, one rank, best of %d interleaved rounds")
   :format(v.preset, SHAPES[v.preset].n_layer, SHAPES[v.preset].n_embd, matrices, v.rounds))
print("")
print("| variant | Muon ms per step | against plain |")
print("|---|---|---|")
for i, r in ipairs(runs) do
   print(("| %s | %.1f | %.3f |"):format(VARIANTS[i][1], 1e3 * r.best, r.best / runs[1].best))
end
