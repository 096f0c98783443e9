-- recipe_tp.lua: tensor parallelism in recipes/gpt_small.lua (--tp), kept beside
-- recipe.lua: the refusals before any work, the process grid the run is built on, and the
-- full tensors --save-params writes. The model's side is lw.nn.GPT{ tp } (lw.tp says how the
-- shards lie); the optimizer's, lw.optim with the TP group (tp_comm) and --muon-tp-mode.
local lw = require("lwopt")
local errors = require("lwopt.errors")

local recipe_tp = {}

local fail = errors.failer(nil)

-- Refuses --tp where it cannot work yet, with the flags' numbers (v: the checked flags, presets
-- filled), and --muon-tp-mode without --tp. Needs no communicator: the world's size is checked
-- by recipe_tp.check_world.
function recipe_tp.check_flags(v)
   if v.tp == 1 then
      if v.muon_tp_mode then
         fail("--muon-tp-mode says how Muon treats matrices split by tensor parallelism: add "
            .. "--tp")
      end
      return
   end
   local bad = lw.tp.check(v.tp, nil, { n_expert = v.n_expert, ep = v.ep })
   if bad then fail("--%s", bad) end
   bad = lw.tp.check(v.tp, nil, { n_head = v.n_head, n_embd = v.n_embd,
      hidden = v.mlp_hidden or 4 * v.n_embd, vocab = v.vocab_rows, pad_vocab = true })
   if bad then
      fail("--%s (--preset %s: %d heads, n_embd %d)", bad, v.preset, v.n_head, v.n_embd)
   end
   -- the library refuses it too, once the model is built; said here before any work
   local variant = lw.optim.muon_variants[v.muon_variant or "default"] or {}
   local equilibrate = v.muon_row_equilibrate == "on"
      or (v.muon_row_equilibrate == nil and variant.row_equilibrate)
   if v.muon_tp_mode == "distributed" and equilibrate then
      fail("--muon-tp-mode distributed shards Newton-Schulz over the TP ranks and cannot "
         .. "equilibrate rows (%s): use --muon-tp-mode duplicated or blockwise, or add "
         .. "--muon-row-equilibrate off", v.muon_row_equilibrate == "on"
            and "--muon-row-equilibrate on" or "--muon-variant " .. v.muon_variant)
   end
end

-- The world's size against --tp (collective-free): lw.tp.check's message, or nil.
function recipe_tp.check_world(v, world) return lw.tp.check(v.tp, world) end

-- The grid: lw.tp.groups's table at --tp above 1 (collective), nil at 1.
function recipe_tp.groups(v, comm)
   return v.tp > 1 and lw.tp.groups(comm, v.tp) or nil
end

-- "on 4 ranks (tp 2 x dp 2)": the ranks and, with --tp, how they split.
function recipe_tp.ranks_text(run)
   local n = run.comm.size
   local text = ("%d rank%s"):format(n, n == 1 and "" or "s")
   if run.tp then text = text .. (" (tp %d x dp %d)"):format(run.tp.size, run.tp.dp_size) end
   return text
end

-- A line for the start of a run whose Muon orthogonalises TP shards alone (nil otherwise): it
-- is another optimizer than at tp 1.
function recipe_tp.note(run, v)
   if not run.tp or v.optimizer ~= "muon" or v.muon_tp_mode ~= "blockwise" then return nil end
   return ("tp %d, --muon-tp-mode blockwise: Muon orthogonalises each TP rank's shards alone, "
      .. "so training differs from tp 1 by design"):format(run.tp.size)
end

-- tensors (ddp:params_on(0)'s list) with every TP-sharded parameter replaced on rank 0 by the
-- full tensor of the tp 1 model (the vocabulary's padding trimmed), keyed by its full name.
-- Collective over the TP group of DP rank 0; a no-op without --tp.
function recipe_tp.full_tensors(run, tensors)
   if not run.tp then return tensors end
   return lw.tp.gather_full(run.ddp, run.tp, tensors)
end

return recipe_tp
