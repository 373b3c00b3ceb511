--------------------------- MODULE RateDeclaration ---------------------------
(***************************************************************************)
(* Two deploys that declare different rate limits for one task, side by   *)
(* side (a rolling deploy that changes the rate): which declaration each  *)
(* lease applies, in lua/lease.lua's cursor().                            *)
(*                                                                         *)
(* Workers 1..OLDER declare the old limit (1), OLDER+1..OLDER+NEWER the    *)
(* new one (2). Redis keeps the declaration the limit was stored with      *)
(* (`stored`, its `<name>|interval` and `<name>|burst`; 0 before any), the *)
(* workers whose leases applied it as their own since (`holders`, the      *)
(* ZSET `holders:<name>`), and the last of them (`last`).                  *)
(*   Lease(w)  a lease by w that applies the limit (one atomic step, up   *)
(*             to LEASES each). Its own declaration stored, or none yet:  *)
(*             it applies its own and joins the holders. Another stored,  *)
(*             a holder up (its worker record exists): it defers,         *)
(*             applying the stored one and changing nothing. Another      *)
(*             stored and every holder down: it stores its own, is the    *)
(*             only holder, and releases the waiting line (`releases`),   *)
(*             whose tasks are checked again at the new rate (RateLimit's *)
(*             Release).                                                  *)
(*   Stop(w)   w stops (its record deleted, or expired after a crash).    *)
(*                                                                         *)
(* NoThrash: every release follows a stop, so two deploys that both keep  *)
(* leasing never release each other's line. KeepsARunningDeploysLimit: no *)
(* release while a worker that applied the stored limit still runs, so a  *)
(* rolling deploy keeps the old limit until every old worker that applied *)
(* it has stopped. TakesOverFromTheStopped: with every holder stopped, a  *)
(* stored declaration holds no lease back. Every lease applies the stored *)
(* declaration, so the queue runs at one rate at a time, which RateLimit's *)
(* NeverOverRate then bounds.                                             *)
(*                                                                         *)
(* RateDeclaration.cfg: all hold. Mutants: RateDeclarationEveryLease.tla  *)
(* (no holders), RateDeclarationLastHolder.tla (the last holder only).    *)
(* Python transcription: rate_declaration.py.                             *)
(***************************************************************************)
EXTENDS Naturals

CONSTANTS OLDER, NEWER, LEASES

ASSUME OLDER \in Nat /\ NEWER \in Nat /\ LEASES \in Nat \ {0}

Workers == 1..(OLDER + NEWER)
NONE == 0
Declared(w) == IF w <= OLDER THEN 1 ELSE 2

VARIABLES stored, holders, last, up, leases, releases, stops

vars == <<stored, holders, last, up, leases, releases, stops>>

TypeOK ==
    /\ stored \in {NONE, 1, 2}
    /\ holders \subseteq Workers
    /\ last \in {NONE} \cup Workers
    /\ up \in [Workers -> BOOLEAN]
    /\ leases \in [Workers -> 0..LEASES]
    /\ releases \in Nat
    /\ stops \in Nat

Init ==
    /\ stored = NONE
    /\ holders = {}
    /\ last = NONE
    /\ up = [w \in Workers |-> TRUE]
    /\ leases = [w \in Workers |-> 0]
    /\ releases = 0
    /\ stops = 0

\* Holds(w): a worker other than w that applied the stored declaration is up.
Holds(w) == \E h \in holders : h # w /\ up[h]

\* A lease by w; `defers`: whether it applies a stored declaration not its own.
LeaseWith(w, defers) ==
    /\ up[w]
    /\ leases[w] < LEASES
    /\ leases' = [leases EXCEPT ![w] = @ + 1]
    /\ IF stored \in {NONE, Declared(w)}
          THEN /\ stored' = Declared(w)
               /\ holders' = holders \cup {w}
               /\ last' = w
               /\ UNCHANGED releases
       ELSE IF defers
          THEN UNCHANGED <<stored, holders, last, releases>>
       ELSE /\ stored' = Declared(w)
            /\ holders' = {w}
            /\ last' = w
            /\ releases' = releases + 1
    /\ UNCHANGED <<up, stops>>

Lease(w) == LeaseWith(w, Holds(w))

Stop(w) ==
    /\ up[w]
    /\ up' = [up EXCEPT ![w] = FALSE]
    /\ stops' = stops + 1
    /\ UNCHANGED <<stored, holders, last, leases, releases>>

Next ==
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Stop(w)

Spec == Init /\ [][Next]_vars

NoThrash == releases <= stops

\* No release while a worker that applied the stored declaration runs.
KeepsARunningDeploysLimit ==
    [][releases' > releases => \A h \in holders : ~up[h]]_vars

\* A lease by a worker whose declaration is not stored, every holder down: it takes over.
TakesOverFromTheStopped ==
    [][\A w \in Workers :
          (/\ leases'[w] = leases[w] + 1
           /\ stored \notin {NONE, Declared(w)}
           /\ \A h \in holders : ~up[h])
          => stored' = Declared(w)]_vars

=============================================================================
