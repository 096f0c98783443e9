-- ep.lua: expert parallelism's communicators (issue 16). The world of W ranks splits into W/E EP
-- groups of E consecutive ranks (world rank r is in EP group floor(r / E), at EP rank r % E) and
-- E expert-data-parallel groups (the ranks with the same EP rank, r % E, at expert-DP rank
-- floor(r / E)). EP rank j holds experts [j * n/E, (j + 1) * n/E) of every layer; the tokens
-- move between the ranks of one EP group (nn.MoE), the experts' gradients are averaged over one
-- expert-DP group (lw.ddp.new's expert_comm), the dense parameters over the world.
local ep = {}

local function is_count(v) return type(v) == "number" and v == math.floor(v) and v >= 1 end

-- Refuses an EP size that does not divide the world or the experts, naming the numbers; nil
-- when it is good. Needs no communicator (the recipe checks before any work).
function ep.check(e, world, n_expert)
   if not is_count(e) then return ("ep (%s) must be a positive integer"):format(tostring(e)) end
   if world % e ~= 0 then
      return ("ep %d does not divide the %d ranks (the world splits into groups of ep ranks)")
         :format(e, world)
   end
   if e > 1 and (n_expert or 0) == 0 then
      return ("ep %d needs a mixture of experts (n_expert is 0)"):format(e)
   end
   if n_expert and n_expert > 0 and n_expert % e ~= 0 then
      return ("ep %d does not divide the %d experts (each EP rank holds n_expert / ep of them)")
         :format(e, n_expert)
   end
   return nil
end

-- ep.groups(comm, e, n_expert) -> { size = e, rank (EP rank, r % e), group (floor(r / e)),
-- comm (the EP group's communicator), expert_comm (the expert-DP group's), first, count (this
-- rank's experts: global indices first .. first + count - 1) }. Collective over comm (two
-- comm:split). Errors as ep.check.
function ep.groups(comm, e, n_expert)
   local bad = ep.check(e, comm.size, n_expert)
   if bad then error("lw.ep: " .. bad, 2) end
   local r = comm.rank
   local g = { size = e, rank = r % e, group = math.floor(r / e) }
   g.comm = comm:split(g.group, r)
   g.expert_comm = comm:split(g.rank, r)
   local per = math.floor((n_expert or 0) / e)
   g.first, g.count = g.rank * per, per
   return g
end

return ep
