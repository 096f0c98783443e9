-- ep_spec.lua: expert parallelism's groups on one rank (the multi-rank runs, ep 2 against ep 1,
-- are in tests/lua/train_consistency.lua).
local lw = require("lwopt")

describe("lw.ep", function()
   it("refuses an ep that does not divide the ranks, naming both", function()
      assert.equal("ep 3 does not divide the 4 ranks (the world splits into groups of ep ranks)",
         lw.ep.check(3, 4, 6))
   end)

   it("refuses an ep that does not divide the experts, naming both", function()
      assert.equal("ep 4 does not divide the 6 experts (each EP rank holds n_expert / ep of them)",
         lw.ep.check(4, 4, 6))
   end)

   it("refuses ep above 1 for a dense model and accepts a good split", function()
      assert.truthy(lw.ep.check(2, 2, 0):find("needs a mixture of experts", 1, true))
      assert.is_nil(lw.ep.check(2, 4, 8))
      assert.truthy(lw.ep.check(0, 4, 8):find("positive integer", 1, true))
   end)

   it("splits a one-rank world into one group holding every expert", function()
      local g = lw.ep.groups(lw.comm.init(), 1, 8)
      assert.same({ 1, 0, 0, 0, 8 }, { g.size, g.rank, g.group, g.first, g.count })
      assert.equal(1, g.comm.size)
      assert.equal(1, g.expert_comm.size)
   end)

   it("has a model declare only its EP rank's experts, by global index", function()
      local g = { size = 2, rank = 1, comm = lw.comm.init() }
      local model = lw.nn.GPT.new{ n_layer = 1, n_embd = 8, n_head = 2, vocab = 16, seq_len = 4,
         n_expert = 4, ep = g }
      local names = {}
      for _, p in ipairs(model:parameters()) do
         local e = p.name:match("experts%.(%d+)%.")
         if e then names[tonumber(e)] = true end
      end
      assert.same({ [2] = true, [3] = true }, names)
   end)
end)
