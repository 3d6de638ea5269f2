"""The English the output guard knows: function words, the common vocabulary of a phone
call, and the frequent words of the languages a small model drifts into.

A sentence the LLM writes is spoken only if every word in it is English or comes from
the policy's instruction (``agent.conversation.guard``); a base model's Chinese, Indonesian or
Spanish fragments, its invented jargon and its misspellings are not. The lists are deliberately
plain: a word missing here only means the policy's own text is spoken instead of the
LLM's, never that something unsafe is said. Inflections (-s, -ed, -ing, -ly, -er,
-est) are matched to their base word by ``is_english``.
"""

from __future__ import annotations

from functools import lru_cache

#: Function words: pronouns, determiners, auxiliaries, prepositions, conjunctions and the
#: commonest adverbs. They carry no fact, so they never need the instruction's support.
STOP_WORDS = frozenset(
    """
    a an the this that these those here there where when what which who whom whose why how
    i me my mine myself you your yours yourself we us our ours ourselves he him his she her
    hers it its itself they them their theirs themselves one ones someone anyone everyone
    something anything everything nothing somebody anybody everybody nobody
    am is are was were be been being do does did done doing have has had having
    will would shall should can could may might must ought
    i'm i'll i'd i've you're you'll you'd you've we're we'll we'd we've it's that's there's
    here's what's who's let's he's she's they're they'll they'd they've
    don't doesn't didn't won't wouldn't can't cannot couldn't shouldn't isn't aren't wasn't
    weren't haven't hasn't hadn't mustn't
    not no nor and or but so if then than because since while until unless although though
    whether as of to in on at by for with about from into onto over under after before
    between through during without within along across around against toward towards upon
    up down out off again further once also too very just only even still already yet ever
    never always often sometimes usually perhaps maybe quite rather really almost
    all any both each every few more most other some such own same another much many lot
    lots little less least else enough either neither
    """.split()
)

#: Conversation: politeness, acknowledgement, the generic verbs and nouns any reply may
#: use. These never count as content the instruction must support.
GENERIC_WORDS = frozenset(
    """
    hello hi hey thank thanks please sorry apologize apologies pardon excuse welcome
    okay ok alright fine great good wonderful perfect glad happy pleased appreciate
    understand understood see hear know get got let help helpful assist
    sure certainly absolutely course definitely indeed of
    now today's well right kind kindly gently moment quick quickly brief briefly
    like want wish would love mind think feel believe hope
    just also again still then anyway actually really simply
    go going make making take taking give giving ask asking tell telling say saying said
    question questions answer answers way ways thing things something
    able possible option options choice choices
    """.split()
)

#: Every-day vocabulary, and the words of a collection call: what an LLM phrasing the
#: policy's questions may reasonably say. Whether a word's *meaning* is justified is the
#: guard's content check; this list only says it is English.
COMMON_WORDS = frozenset(
    """
    about above accept accepted accepting access according account accounts across act
    action actually add added additional address advance advice affect afford after
    afternoon again against age agency agent ago agree agreed agreement ahead aid aim
    alone along aloud already alright also alternative altogether amount amounts
    announce another answer anytime anyway anywhere apart appear apply appointment
    approve approved area arrange arranged arrangement ask assistance assistant assume
    attempt attention automated available avoid aware away back background bad balance
    bank banking base based basic basis bear become before begin beginning behalf behind
    best better big bill billing bills birth birthday bit black blue board body book both
    bottom box break brief bring budget build business busy buy call called caller calling
    calls calm came car card cards care careful carry case cash catch cause cent cents
    certain chance change changed charge charged charges chat check checked checking checks
    cheque child choose chose chosen city claim clear clearly close closed code collect
    collected collection collector come comes coming comfortable comment common company
    complete completed concern concerned concerns confirm confirmation confirmed connect
    consider contact continue control convenient conversation copy correct cost costs
    could count couple cover covered create credit creditor current currently customer
    cut daily date dates day days deal dealing dear debit debt debts decide decided
    decision default delay department describe detail details difference different
    difficult digit digits direct directly discount discuss discussed disclose display
    divide document dollar dollars door double doubt due during duty each early earlier
    earn easier easy effort eight eighteen eighty eleven email end ended ending enjoy
    enough ensure enter entire entirely equal error especially even evening event ever
    every exact exactly example except expect expected explain extra eye face fact fair
    family far fast feel fifteen fifth fifty figure file fill final finally finance
    financial find fine finish first five fixed follow following food form forty forward
    four fourteen fourth free friday friend front full fully fund funds future general
    generally get give given glad goal goes going gone good goodbye great group guess
    half hand handle handled hang happen happened hard head health hear heard help hold
    holding home honest hope hour hours house however human hundred idea identify
    identity immediately important include included including income information inform
    informed instead installment installments instalment instalments interest involved
    issue issues item job join keep kept key kind knew know known large last late later
    least leave left less lesson let letter level life light likely limit line link list
    listen little live long look looking lose loss lost low lower lowest lump made mail
    main make manage manageable many mark matter maximum mean means meet member mention
    mentioned message method methods middle might million mind minimum minute minutes
    miss missed mistake moment monday money month monthly months more morning most move
    much name names nature near need needed needs new next nice nine nineteen ninety
    normal note noted notice number numbers offer offered offering office okay old once
    one online open option order original other otherwise outstanding over owe owed owes
    owing page paid pair part partial particular party pass past pay payable paying
    payment payments people per percent percentage perhaps period person personal phone
    pick place plan planned plans play point policy portion possible post pound practice
    prefer prefers present pretty previous price primary prior privacy private probably
    problem problems proceed process program promise proper protect provide provided
    purpose put quarter question quick quite range rate rather reach reached read ready
    real reason reasonable receive received recent record recorded recording records
    reduce reduced reduction reference regarding regular remain remaining remember remind
    reminder remove repeat reply request require required resolve resolved respond
    response rest result return review right room round rule run safe safely said same
    saturday save saved saving savings schedule scheduled second secure securely security
    see seem sell send sending sense sent serious service set settle settled settlement
    seven seventeen seventy several share short side sign simple since single situation
    six sixteen sixty size small smaller smallest so soon sound speak speaking special
    specific spell split spread staff stand start started starting state statement stay
    step steps stop store story straight stretch such suggest suit suitable sum sunday
    support suppose sure system take talk talking team ten tenth term terms text than
    thank that the then there thing think third thirteen thirty thousand three through
    thursday time timeline times today together told tomorrow tonight total touch toward
    transfer transferred true trust try trying tuesday turn twelve twenty two type under
    understand unit unless until update upon use used useful usual usually valid value
    verify verified very via view voice wait waiting want wants way ways wednesday week
    weekly weeks welcome well went whatever whenever while whole why wide willing within
    without wonder word words work worked working works worry worth write written wrong
    year years yes yesterday yet zero
    january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday weekend weekday
    eleventh twelfth thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth
    nineteenth twentieth thirtieth sixth seventh eighth ninth
    appreciated cooperation patience assistant automated hello goodbye
    afraid apologize apologies concerned difficult easier frustrating understandable
    options option choice prefer preferred preference convenient convenience
    manage managed manageable affordable afford budget budgeting flexible flexibility
    lowest smallest minimum maximum least most highest largest best better
    discount discounts reduced reduce settle settlement offer offers deal proposal
    installment installments instalment instalments plan plans monthly weekly schedule
    balance balances total amount amounts sum owed remaining full whole entire
    payment payments pay paying paid debit card bank transfer check cheque method
    link secure securely online portal keypad
    date dates day days time times when soon later earlier start begin beginning
    confirm confirming confirmation correct right exactly read back repeat
    hear heard catch caught missed sorry pardon repeat again once more
    work works working suit suits fit fits fine okay good great sounds sound
    ability absolutely accident accurate achieve acknowledge actual adjust admit adult
    advantage affordable afraid agent agreeable alarm alert allow allowed almost alternative
    amazing angry animal announce annoying anxious apartment appreciate approach
    appropriate argue arm arrive article aside asleep attach attend attitude audio aunt
    authority average avoid awake award awful baby bag ball bargain basically battery
    beautiful bed begin believe belong benefit beside beyond bigger birth blame block
    blood borrow boss bother bottle brand brother brought burden calendar calculate camera
    cancel cancelled capable capital careful carefully casual cause caution celebrate
    center centre challenge chance charity cheap cheaper choice church circumstance
    circumstances citizen class clean clerk client closer cold colleague comfortable
    commitment committed communicate community compare complain complaint complicated
    computer concern condition conditions confident confuse confused confusion consent
    consequence considerate constant contract convince cool corner counter country
    courtesy cousin crazy credit crisis critical cry customer damage danger dark daughter
    dead deadline decent decline deep definitely delighted deliver demand deny depend
    deposit deserve design desk despite detailed determine develop die difference dinner
    direction disagree disappointed discuss disease dispute disputed distance doctor dog
    doing draft dream dress drink drive driver drop dry earn earnest easily eat economy
    edge education effect effective efficient either elderly electric else embarrassed
    emergency emotional employ employer employment empty encourage energy engage enjoy
    entry environment equally estimate evaluate eventually evidence exactly excellent
    exchange excited exciting expense expenses expensive experience expire expired explore
    express extend extension extra extremely fail failed fairly faith familiar fantastic
    father fault favorite favour favor fear fee fees fellow female field fight finances
    fine finger fire firm fit flat flexible floor fly focus folks foot force foreign
    forget forgive forgot formal former fortunately fortune frankly freedom frequent
    fresh friendly frustrated frustrating fun funny garden gas gather generous gentle
    gift girl glass grade grateful greatly grocery grow growth guarantee guard guest guide
    guy habit happily happy hardly hardship harm hate healthy heart heavy helpful hesitate
    hidden high highly hire history hit holiday honestly honor hospital hot hotel huge
    hungry hurry hurt husband ignore ill illness imagine impact impossible improve
    incident income increase incredible indeed individual industry inside insist
    insurance intend interested interesting internet introduce invite involve island
    item itself join joke judge jump junior justice keen kid kids kill kitchen knock
    lack lady land language largely laugh law lawyer lay lead learn learned lease leg
    legal lend length letter library license lie lift likewise limited loan loans local
    lock lonely loose lose loud lovely luck lucky lunch machine mad mainly major male
    manager manner market married master match material maybe meal meaning measure
    medical medicine meeting memory mental mere merely method middle military mine minor
    mirror mission mistake mix mobile modern mom mother motor mouth movie mrs mr ms
    music mutual narrow nation natural naturally nearly necessary neck negative
    negotiate neighbor neighbour nervous network never nevertheless news newspaper night
    nobody noise none nor north nose notably notes nothing notify novel nurse obvious
    obviously occasion occur odd offense official oil older onto opinion opportunity
    oppose ordinary organize otherwise outcome outside overall owner pack pain paint
    paper parent parents park partly partner patient pattern peace penalty pension
    perfectly permanent permission pet photo physical picture piece pity plain plane
    plant pleasant pleasure plenty pocket politely polite poor popular position positive
    possibly pound power powerful practical pray precise prepare prepared press pressure
    prevent pride print priority prize probable produce professional profit progress
    project promptly proof properly property propose protect protection proud prove
    public pull pump punish purchase push qualify quality quiet quietly race radio rain
    raise rapid rarely reaction realize realistic reasonably recall recently recognize
    recommend recover red reflect refuse regard regret regularly relate relationship
    relative relatively relax relief relieve rely remark remote rent repair replace
    report represent reputation require rescue research reserve respect responsibility
    responsible restaurant restore retire retired rich ride ring rise risk road rock
    role roll roof rough route rude ruin rush sad sadly salary sale satisfied satisfy
    scale scare scared school score screen search season seat secret section seek
    select self senior sensitive separate series serve session settle severe shape
    sharp shift shock shop shopping shortly shot show shut sick sight signal signature
    silly similar simply sincere sincerely sing sister sit site skill skip sleep slight
    slightly slow slowly smart smile smoothly social society soft solution solve son
    song sorry sort source south space spare spend spent spirit spite sport spot
    spouse square stable stage standard star state station status steady stick stock
    stomach stone strange stranger stress strict strong struggle struggling student
    study stuff stupid style subject submit succeed success successful sudden suddenly
    suffer sufficient sugar summer supply surprise surprised survive suspect sweet
    switch table tale tape task tax teach teacher tear technical technically telephone
    television temporary tend terrible test thanks theirs therefore thick thin tight
    tired title tone tool top topic totally tough tour town track trade traffic train
    training travel treat treatment tree trial trip trouble truck truly truth twice
    typical typically ugly ultimately unable unclear uncomfortable understanding
    unemployed unfair unfortunately unhappy union unique unit university unknown
    unlikely unpaid unusual upset urgent useful user usual vacation various vehicle
    version victim video village visit vital voice volume vote wage wages walk wall
    war warm warn warning wash waste watch water weak wealth wear weather website
    wedding weekend weigh weight weird west wet wheel white wife wild win wind window
    winter wise wish woman wonderful wood worker world worried worse worst wow wrap
    yeah yep young youth
    certainly sincerely gladly happily kindly politely briefly shortly simply gently
    setup arrange arrangement arrangements affordable workable doable feasible
    attorney callback consumer obtain obtained restart sentence specialist transcribe
    transcribed transcript verification arrest sue
    """.split()
)

#: Frequent words of the languages a small multilingual model drifts into that are not
#: also English words: one of them in a sentence marks it as not English.
FOREIGN_WORDS = (
    frozenset(
        """
    el los las del por para usted ustedes que qué como pero muy gracias hola buenos
    buenas dias señor senor senora pagar pago dinero deuda cuenta saldo fecha tiene
    tengo quiero puede puedo estoy esta este esto eso también tambien ahora mañana manana
    sí si porque cuando donde
    yang dan di ke dari ini itu saya anda akan tidak untuk dengan ada bisa bayar uang
    hutang utang terima kasih tolong sudah belum juga atau karena kami kita mereka dia
    apa siapa bagaimana kapan berapa hari bulan tahun sekarang nanti selamat pagi
    le les des une est pas avec vous nous je suis merci bonjour oui mais sur
    dans qui votre notre très tres payer argent
    der das und ist nicht ich sie wir ein eine mit auf für fur danke bitte ja nein
    zahlen geld
    não nao obrigado obrigada você voce dinheiro
    di che sono grazie ciao pagare soldi
    ng mga sa ang ako ikaw po salamat opo hindi
    """.split()
    )
    - STOP_WORDS
    - COMMON_WORDS
    - GENERIC_WORDS
)

_SUFFIXES = ("'s", "s", "es", "ed", "d", "ing", "ly", "er", "est", "ies", "ied", "ily")


@lru_cache(maxsize=4096)
def stem(word: str) -> str:
    """A crude stem, enough to match "months" to "month" and "paying" to "pay"."""
    w = word.lower().replace("\u2019", "'")
    if w.endswith("'s"):
        w = w[:-2]
    for suffix, repl in (
        ("ies", "y"),
        ("ied", "y"),
        ("ily", "y"),
        ("ing", ""),
        ("ed", ""),
        ("ly", ""),
        ("est", ""),
        ("er", ""),
        ("es", ""),
        ("s", ""),
    ):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            return w[: -len(suffix)] + repl
    return w


VOCABULARY = STOP_WORDS | GENERIC_WORDS | COMMON_WORDS
_VOCABULARY_STEMS = frozenset(stem(w) for w in VOCABULARY)


@lru_cache(maxsize=8192)
def is_english(word: str) -> bool:
    """Whether ``word`` (any case) is a word of the vocabulary or an inflection of one."""
    w = word.lower().replace("\u2019", "'")
    if w in FOREIGN_WORDS:
        return False
    if w in VOCABULARY:
        return True
    for suffix in _SUFFIXES:
        if w.endswith(suffix) and len(w) > len(suffix) + 1:
            base = w[: -len(suffix)]
            if base in VOCABULARY or base + "e" in VOCABULARY:
                return True
            if suffix in ("ies", "ied", "ily") and base + "y" in VOCABULARY:
                return True
            if len(base) > 2 and base[-1] == base[-2] and base[:-1] in VOCABULARY:
                return True  # "stopped", "planning"
    return stem(w) in _VOCABULARY_STEMS
