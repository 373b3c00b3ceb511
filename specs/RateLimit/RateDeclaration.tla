--------------------------- MODULE RateDeclaration ---------------------------
(***************************************************************************)
(* Two deploys that declare different rate limits for one task, side by   *)
(* side (a rolling deploy that changes the rate): which declaration each  *)
(* lease applies, in lua/lease.lua's cursor().                            *)
(*                                                                         *)
(* Workers 1..OLDER declare the old limit (1), OLDER+1..OLDER+NEWER the new one   *)
(* (2). Redis keeps the declaration the limit was stored with (`stored`,  *)
(* its `<name>|interval` and `<name>|burst`; 0 before any) and the worker *)
(* whose lease stored or last applied it (`holder`, `<name>|by`).          *)
(*   Lease(w)  a lease by w that applies the limit (one atomic step, up   *)
(*             to LEASES each). Its own declaration stored, or none yet:  *)
(*             it applies its own and becomes the holder. Another stored, *)
(*             whose holder is up (its worker record exists) and is not w:*)
(*             it defers, applying the stored one and changing nothing.   *)
(*             Another stored whose holder is down: it stores its own and *)
(*             releases the waiting line (`releases`), whose tasks are    *)
(*             checked again at the new rate (RateLimit's Release).        *)
(*   Stop(w)   w stops (its record deleted, or expired after a crash).    *)
(*                                                                         *)
(* NoThrash: every release follows a stop, so two deploys that both keep  *)
(* leasing never release each other's line; TakesOverFromTheStopped: a    *)
(* stopped worker's declaration holds no lease back, so the newer deploy  *)
(* governs once the older one's workers stop. Every lease applies the     *)
(* stored declaration, so the queue runs at one rate at a time, which     *)
(* RateLimit's NeverOverRate then bounds.                                 *)
(*                                                                         *)
(* RateDeclaration.cfg: all hold. Mutant: RateDeclarationEveryLease.tla.  *)
(* Python transcription: rate_declaration.py.                             *)
(***************************************************************************)
EXTENDS Naturals

CONSTANTS OLDER, NEWER, LEASES

ASSUME OLDER \in Nat /\ NEWER \in Nat /\ LEASES \in Nat \ {0}

Workers == 1..(OLDER + NEWER)
NONE == 0
Declared(w) == IF w <= OLDER THEN 1 ELSE 2

VARIABLES stored, holder, up, leases, releases, stops

vars == <<stored, holder, up, leases, releases, stops>>

TypeOK ==
    /\ stored \in {NONE, 1, 2}
    /\ holder \in {NONE} \cup Workers
    /\ up \in [Workers -> BOOLEAN]
    /\ leases \in [Workers -> 0..LEASES]
    /\ releases \in Nat
    /\ stops \in Nat

Init ==
    /\ stored = NONE
    /\ holder = NONE
    /\ up = [w \in Workers |-> TRUE]
    /\ leases = [w \in Workers |-> 0]
    /\ releases = 0
    /\ stops = 0

\* Holds(w): another worker's declaration is stored and that worker is up.
Holds(w) == holder # NONE /\ holder # w /\ up[holder]

\* A lease by w; `defers`: whether it applies a stored declaration not its own.
LeaseWith(w, defers) ==
    /\ up[w]
    /\ leases[w] < LEASES
    /\ leases' = [leases EXCEPT ![w] = @ + 1]
    /\ IF stored \in {NONE, Declared(w)}
          THEN /\ stored' = Declared(w)
               /\ holder' = w
               /\ UNCHANGED releases
       ELSE IF defers
          THEN UNCHANGED <<stored, holder, releases>>
       ELSE /\ stored' = Declared(w)
            /\ holder' = w
            /\ releases' = releases + 1
    /\ UNCHANGED <<up, stops>>

Lease(w) == LeaseWith(w, Holds(w))

Stop(w) ==
    /\ up[w]
    /\ up' = [up EXCEPT ![w] = FALSE]
    /\ stops' = stops + 1
    /\ UNCHANGED <<stored, holder, leases, releases>>

Next ==
    \/ \E w \in Workers : Lease(w)
    \/ \E w \in Workers : Stop(w)

Spec == Init /\ [][Next]_vars

NoThrash == releases <= stops

\* A lease by a worker whose declaration is not stored, the holder down: it takes over.
TakesOverFromTheStopped ==
    [][\A w \in Workers :
          (/\ leases'[w] = leases[w] + 1
           /\ stored \notin {NONE, Declared(w)}
           /\ ~up[holder])
          => stored' = Declared(w)]_vars

=============================================================================
