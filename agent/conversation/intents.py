"""Understanding a caller's turn: what they asked for, and the facts they gave.

Rules, not a model. The input is Whisper's text of one caller turn: mixed case,
punctuation, numbers as digits or as words. The output is an ``Understanding``:
the caller's intents (a dispute, "stop calling", a lawyer, a payment offer...)
and the facts the policy needs (an amount, a date, a name, a date of birth, the
last four digits, a payment method). The policy acts on these, never on the
LLM's reading of the call, so a compliance signal (rule C8, C12) cannot be
missed because a model phrased it differently.

Card data never gets past this module (rule C11): ``redact_card_numbers``
removes card numbers, expiry dates and security codes from a transcript, and
``understand`` reads only the redacted text, which it hands back in
``Understanding.text`` for the LLM, the store and the logs.

The intent rules live here; numbers and money are read by ``spoken_numbers``, dates and
times by ``spoken_dates``, and card data is removed by ``redaction`` first.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from enum import StrEnum

from agent.conversation.redaction import (
    CARD_REMOVED,
    CODE_REMOVED,
    EXPIRY_REMOVED,
    redact_card_numbers,
)
from agent.conversation.spoken_dates import (
    BIRTH_CUES,
    WEEKDAYS,
    Date,
    read_dates,
    spoken_birth_date,
    time_named,
)
from agent.conversation.spoken_numbers import (
    MONTHS,
    TENS_WORDS,
    UNIT_WORDS,
    Num,
    Tok,
    amounts_ambiguous,
    choose_money,
    clauses_of,
    discount,
    installments,
    last_four,
    negated,
    normalize,
    phone_number,
    read_money,
    read_numbers,
    said_once,
    tokenize,
)


class Intent(StrEnum):
    """What a caller's turn asks for or tells us; several may hold at once."""

    YES = "yes"
    NO = "no"
    DISPUTE = "dispute"
    STOP_CALLING = "stop_calling"
    CEASE = "cease"
    ATTORNEY = "attorney"
    BANKRUPTCY = "bankruptcy"
    DECEASED = "deceased"
    HARDSHIP = "hardship"
    WRONG_NUMBER = "wrong_number"
    ROBOT_QUESTION = "robot_question"
    HUMAN_REQUEST = "human_request"
    CALLBACK = "callback"
    PAY_IN_FULL = "pay_in_full"
    PAYMENT_OFFER = "payment_offer"
    THIRD_PARTY = "third_party"
    RECORDING_OBJECTION = "recording_objection"
    ARREST_OR_SUIT_QUESTION = "arrest_or_suit_question"
    CARD_NUMBER = "card_number"
    REFUSAL = "refusal"
    WHO_IS_CALLING = "who_is_calling"
    WHAT_ABOUT = "what_about"
    AT_WORK = "at_work"
    WORKPLACE_FORBIDS_CALLS = "workplace_forbids_calls"


class Expectation(StrEnum):
    """The question the agent just asked, so a short answer can be read against it."""

    IDENTITY = "identity"  # "Am I speaking with Jordan Smith?"
    NAME = "name"  # "Who am I speaking with?"
    CONFIRM = "confirm"  # any yes/no question: "Does Friday work?"
    DATE_OF_BIRTH = "date_of_birth"
    LAST4 = "last4"
    AMOUNT = "amount"  # "How much can you pay?"
    DATE = "date"  # "On what date?", "When should we call back?"
    METHOD = "method"
    RECORDING_CONSENT = "recording_consent"  # "Is it all right that this call is recorded?"
    EXPLICIT_YES = "explicit_yes"  # a read-back: only a clear "yes" confirms, never "okay"
    ONE_OR_MONTHLY = "one_or_monthly"  # "one payment of $100, or $100 a month?"
    MONTHLY_AMOUNT = "monthly_amount"  # "How much could you pay each month?"


class PaymentMethod(StrEnum):
    """How the consumer says they will pay, as the agent can read it back."""

    DEBIT_CARD = "debit card"
    CREDIT_CARD = "credit card"
    CARD = "card"
    BANK_TRANSFER = "bank transfer"  # ACH
    CHECK = "check"
    MONEY_ORDER = "money order"


@dataclass(frozen=True)
class Understanding:
    """One caller turn, read.

    ``amount_cents`` is the amount the caller offered or named; ``monthly`` says it
    is a monthly amount ("100 a month"), ``per`` the period of any recurring one
    ("month", "week", "two weeks"); ``voicemail`` says the line is an answering
    machine's greeting, not a person (rule C10); ``discount_pct`` is a discount the
    caller asked for ("can you take 40 percent off", "settle for half": 50).
    ``text`` is the transcript with card data removed: the only form of it that
    may reach the LLM, the store or a log.
    """

    intents: frozenset[Intent] = frozenset()
    amount_cents: int | None = None
    date: dt.date | None = None
    name: str | None = None
    date_of_birth: dt.date | None = None
    last4: str | None = None
    method: str | None = None
    discount_pct: float | None = None
    monthly: bool = False
    per: str | None = None
    voicemail: bool = False
    text: str = ""
    #: The speaker talks of the consumer, or of themselves as someone else (C3): "she",
    #: "her husband", "I handle his bills". Before verification this makes a third party.
    third_person: bool = False
    #: A dispute of part of the debt only ("the rest is fees I never agreed to").
    partial_dispute: bool = False
    #: The amount is said to be paid once ("just once", "one payment", "lump sum").
    once: bool = False
    #: A number of payments or months named ("in three payments", "over six months").
    installments: int | None = None
    #: Several different amounts, or a range: which one is meant must be asked.
    amounts_ambiguous: bool = False
    #: A clock time named ("after six", "at 7 pm") and how: "after", "before" or "at".
    time: dt.time | None = None
    time_relation: str | None = None
    #: A phone number said (digits only), and a lawyer's name, for the attorney signal.
    phone_number: str | None = None
    attorney_name: str | None = None
    #: Part of a date of birth was given (a month and year, a day without a year).
    partial_date: bool = False


# -- intents -------------------------------------------------------------------------

_REL = (
    r"(?:wife|husband|spouse|partner|mother|mom|mum|father|dad|son|daughter|brother|sister"
    r"|roommate|room mate|girlfriend|boyfriend|fiance|fiancee|friend|aunt|uncle|grandmother"
    r"|grandma|grandfather|grandpa|niece|nephew|cousin|caretaker|caregiver|neighbor"
    r"|neighbour|landlord|landlady|assistant|coworker|boss|child|kid|stepson|stepdaughter"
    r"|stepmother|stepfather|mother in law|father in law|sister in law|brother in law)"
)
_PERSON = (
    r"(?:person|human|agent|representative|rep|supervisor|manager|operator|someone|somebody"
    r"|anybody|anyone|people|human being|live person|real person|customer service)"
)
_ROBOT = (
    r"(?:robot|bot|computer|machine|recording|ai|artificial intelligence|automated\w*|real"
    r"|human|real person|live person|person|actual person|recorded message)"
)
_FILLERS = r"(?:(?:uh|um|oh|ah|well|hmm|er|okay so|so)\s+)*"
_NUMBER_WORD = "|".join([*UNIT_WORDS, *TENS_WORDS, "a hundred", "a thousand"])


@dataclass(frozen=True)
class _Rule:
    intent: Intent
    pattern: re.Pattern[str]
    negatable: bool = True


def _rules(intent: Intent, *patterns: str, negatable: bool = True) -> list[_Rule]:
    return [_Rule(intent, re.compile("|".join(f"(?:{p})" for p in patterns)), negatable)]


_INTENT_RULES: list[_Rule] = [
    *_rules(
        Intent.DISPUTE,
        r"\bdisput\w*",
        r"\b(?:do|does|did) not (?:really )?owe\b",
        r"\bowe (?:you |them |anybody |anyone )?nothing\b",
        r"\b(?:this|that|it) is not (?:mine|my (?:debt|account|bill|card|loan|signature))\b",
        r"\bnot (?:my|our) (?:debt|account|bill|loan|card)\b",
        r"\bnever (?:had|opened|signed up for|took out|applied for|used)"
        r" (?:an?|that|this|the|any)\b",
        r"\b(?:already|previously) (?:paid|settled|took care of)\b",
        r"\b(?:paid|settled) (?:it|this|that) (?:off|already)\b",
        r"\bidentity (?:theft|was stolen|stolen)\b|\bstole my identity\b|\bfraud\w*\b",
        r"\b(?:do|did) not recogni[sz]e\b",
        r"\b(?:amount|balance|that|this|it) is (?:wrong|incorrect|not right|too high|a mistake)\b",
        r"\b(?:wrong|incorrect) (?:amount|balance)\b",
        r"\bprove (?:it|that|this|i owe)\b|\b(?:proof|validation|verification) (?:of|that)\b",
        r"\bvalidat\w* (?:the|this|that) (?:debt|account)\b",
        r"\bsend me (?:proof|something in writing|a validation|the paperwork|documentation)\b",
        r"\bnot responsible for (?:this|that|it|the)\b",
        r"\bonly owe\b|\bnever agreed to\b|\b(?:did|do) not agree to (?:th\w+ )?(?:fees|charges)\b",
        r"\b(?:part|some|most|half) of (?:it|this|that|the (?:balance|amount|debt)) (?:is|are) "
        r"(?:not mine|wrong|fees|made up|bogus|interest)\b",
        r"\b(?:fees|charges|interest) (?:that )?(?:i|we) (?:never|did not)\b",
        r"\b(?:bogus|illegal|unauthori[sz]ed|junk) (?:fees|charges)\b",
    ),
    *_rules(
        Intent.STOP_CALLING,
        r"\b(?:stop|quit|cease)"
        r" (?:calling|phoning|ringing|contacting|harassing|bothering|texting)\b",
        r"\b(?:do not|never|no more) (?:ever )?(?:call|contact|phone|ring|text)(?:ing)? "
        r"(?:me|us|here|this number|my (?:phone|number|cell)|again|anymore|back)\b"
        r"(?! (?:at|before|after|during|on|in the|when|while|until|between|around|till)\b)",
        r"\bno more (?:phone )?calls\b",
        r"\b(?:take|remove|delete|put) (?:me|my number|this number|my name|us)(?: off| from| on)? "
        r"(?:of )?(?:your|the|this) (?:\w+ )?(?:list|system|records)\b",
        r"\bdo not call list\b|\blose (?:my|this) number\b",
        r"\bleave (?:me|us) (?:the (?:hell|heck|fuck) )?alone\b",
        r"\bi do not want (?:any more |anymore |more |these |your |any )?(?:phone )?calls\b",
        r"\bi do not want you (?:to )?(?:call|contact)(?:ing)? (?:me|here|this number)\b",
    ),
    *_rules(
        Intent.CEASE,
        r"\bcease and desist\b|\bcease (?:all )?(?:communication|contact|correspondence)s?\b",
        r"\b(?:do not|never|stop|no more) (?:contact\w*|communicat\w*)(?: with)? (?:me |us )?"
        r"(?:at all|in any way|ever again|by any (?:means|method)|whatsoever|period)\b",
        r"\bstop all (?:contact|communication|correspondence)s?\b",
        r"\ball (?:contact|communication|correspondence)s? (?:to )?stop\b",
        r"\bno (?:more )?(?:contact|communication)s? (?:at all|of any kind|whatsoever)\b",
        r"\b(?:do not|never) (?:write|mail|email|send) (?:me|to me|anything)\b",
        r"\b(?:letter|in writing|written (?:request|notice))\b.*\b(?:stop|cease)\b",
        r"\b(?:stop|cease)\b.*\b(?:letter|in writing|written (?:request|notice))\b",
    ),
    *_rules(
        Intent.ATTORNEY,
        r"\bmy (?:\w+ )?(?:lawyer|attorney|counsel|legal representative|legal aid)s?\b",
        r"\bi (?:have |had |just |already |recently )*"
        r"(?:have|got|gotten|hired|retained|am working with) (?:an? |my )?(?:\w+ )?"
        r"(?:lawyer|attorney|counsel|legal representation)\b",
        r"\b(?:i am|we are) represented\b|\brepresented by\b",
        r"\b(?:lawyer|attorney) is (?:handling|dealing with|taking care of)\b",
    ),
    *_rules(
        Intent.BANKRUPTCY,
        r"\bbankrupt\w*",
        r"\bchapter (?:7|13|11|seven|thirteen|eleven)\b",
        r"\b(?:it|debt|this|that) (?:was|got|has been) discharged\b",
    ),
    *_rules(
        Intent.DECEASED,
        r"\bpassed (?:away|on)\b",
        r"\b(?:he|she|they|who|husband|wife|mother|father|son|daughter|brother|sister|mom|dad)"
        r" (?:has |had |recently |just )?(?:passed|died)\b",
        r"\b(?:is|are|was) (?:dead|deceased)\b|\bdeceased\b|\bdied\b",
        r"\b(?:his|her|their) (?:death|passing|funeral|estate)\b",
        r"\bno longer (?:living|alive|with us)\b",
    ),
    *_rules(
        Intent.HARDSHIP,
        r"\blost (?:my|his|her|our) (?:job|work|income|house|home)\b|\blaid off\b|\bgot fired\b",
        r"\bout of (?:work|a job)\b|\bunemploy\w*|\bbetween jobs\b",
        r"\b(?:can not|could not|unable to|not able to) (?:afford|pay|make (?:the )?payments?)\b"
        r"(?! (?:\w+ ){0,2}(?:in full|full|whole|entire|all of|that much|everything|the total))"
        rf"(?! (?:\$|\d|that|this much|so much|more|{_NUMBER_WORD}))",
        r"\b(?:do not|does not) have (?:the |any |enough )?(?:money|income|funds|cash)\b",
        r"\bno (?:money|income|job)\b",
        r"\bmedical (?:bills|expenses|debt|issues|problems|condition)\b",
        r"\b(?:in|out of) the hospital\b|\bcancer\b|\bchemo\w*|\bsurgery\b|\billness\b",
        r"\bon (?:disability|unemployment|welfare|food stamps|social security|a fixed income)\b",
        r"\bfixed income\b|\bhardship\b|\bstruggling\b|\b(?:hard|tough|difficult) times?\b",
        r"\bi am (?:flat |totally |completely )?broke\b|\bi am (?:sick|ill)\b(?! of)",
        r"\bbehind on (?:my |the )?(?:bills|rent|mortgage)\b|\bevict\w*|\bdivorce\w*",
    ),
    *_rules(
        Intent.WRONG_NUMBER,
        r"\bwrong (?:number|person|guy|lady|house|phone|name)\b",
        r"\bno ?(?:one|body) (?:here )?(?:by|with|named|called|goes by) (?:that|this|the) name\b",
        r"\bno ?(?:one|body) (?:here |lives here )?(?:named|called|by that name)\b",
        r"\bnever heard of (?:him|her|them|that (?:person|name)|this (?:person|name))\b",
        r"\b(?:do not|never) know (?:anyone|anybody|who that is|who this is|a|that person|"
        r"this person|who you are talking about)\b",
        r"\b(?:does|do) not live here\b|\bno longer (?:lives|living) here\b",
        r"\bnot (?:his|her|their) (?:number|phone)\b",
        r"\b(?:he|she|they) (?:does|do) not have this number\b",
        negatable=False,
    ),
    *_rules(
        Intent.ROBOT_QUESTION,
        rf"\b(?:am i|are we) (?:talking|speaking) (?:to|with) (?:an? )?{_ROBOT}\b",
        rf"\bare you (?:an? |even )?(?:actual |real )?{_ROBOT}\b",
        rf"\bis this (?:an? )?(?:actual |real )?{_ROBOT}\b",
        r"\b(?:you are|you sound like|this is) (?:not )?(?:an? )?"
        r"(?:robot|bot|computer|machine|ai)\b",
        r"\b(?:is|are) (?:this|you) (?:a )?(?:real|human|live)\b|\bare you real\b",
        r"\bis (?:this|that) (?:a )?(?:recording|recorded)\b",
        negatable=False,
    ),
    *_rules(
        Intent.HUMAN_REQUEST,
        r"\b(?:talk|speak|chat) (?:to|with) (?:an? |the |your |some |one of your )?"
        rf"(?:real |live |actual |human )?{_PERSON}\b",
        r"\b(?:get|give|put|transfer|connect|pass) me (?:to |with |through to )?"
        rf"(?:an? |the |your )?(?:real |live |actual )?{_PERSON}\b",
        r"\btransfer me\b",
        r"\b(?:want|need|like) (?:an? |to have an? )?(?:real |live |actual )?"
        r"(?:person|human|agent|representative|supervisor|manager|operator)\b",
        rf"^{_FILLERS}(?:an? )?(?:representative|operator|agent|human|real person|live person"
        r"|supervisor|manager)(?: please)?$",
    ),
    *_rules(
        Intent.CALLBACK,
        r"\bcall (?:me |us )?(?:back|again|later|another time|tomorrow|tonight|next week"
        r"|in the (?:morning|afternoon|evening))\b",
        r"\bcall (?:me|us) (?:on|after|around|this|next|in|at) (?!work\b)",
        r"\b(?:not a good|bad|inconvenient|busy) time\b",
        r"^(?:i am|i am actually) (?:busy|driving|at work|in a meeting|working|on the road|"
        r"in the middle of)",
        r"\b(?:try|reach) (?:me )?(?:again )?(?:later|tomorrow|another time)\b",
        r"\b(?:i will|let me|can i|could i|i can|i could) call (?:you )?back\b",
        r"\b(?:can|could) we (?:talk|do this) (?:later|another time|tomorrow)\b",
    ),
    *_rules(
        Intent.PAY_IN_FULL,
        r"\b(?:pay|settle|clear) (?:\w+ ){0,4}in full\b",
        r"\bpay (?:\w+ ){0,3}(?:the )?(?:full|whole|entire|total)"
        r" (?:amount|balance|thing|debt|bill)\b",
        r"\bpay (?:\w+ ){0,3}(?:all of it|everything|it all|the balance|the whole thing)\b",
        r"\bpay (?:it|this|that|the whole thing|everything|all of it) off\b",
        r"\bpay off (?:the|my|this|that) (?:whole |entire |full )?"
        r"(?:balance|debt|amount|bill|account|thing)\b",
        r"\b(?:all|everything|all of it) (?:at once|in one (?:go|payment|shot))\b",
    ),
    *_rules(
        Intent.PAYMENT_OFFER,
        r"\bi (?:can|could|will|would|might|am able to|am going to|want to|would like to|"
        r"would be able to|should be able to|can probably|could probably|will probably) "
        r"(?:pay|afford|manage|put down|make (?:a |the )?payments?|set up (?:a )?(?:payment|plan)"
        r"|start paying|(?:send|give) (?:you )?(?:a |the |some )?(?:payment|money|check|something"
        rf"|\$|\d|{_NUMBER_WORD})|do (?:\$|\d|about|around|maybe|{_NUMBER_WORD}))\b",
        rf"\b(?:how|what) about (?:\$|\d|{_NUMBER_WORD})",
        r"\bpayment plan\b|\binstal{1,2}ments?\b|\bper month\b",
        r"\blet me pay\b|\b(?:can|could|may) i (?:pay|make (?:a )?payments?|set up)\b",
        r"\bi want to (?:pay|make a payment|settle)\b|\bsettle (?:for|it)\b",
        r"\b(?:i will|i would like to|i want to) (?:take care of|settle) (?:it|this|that)\b",
    ),
    *_rules(
        Intent.THIRD_PARTY,
        rf"\b(?:this is|i am|it is|speaking is|you have|you got) (?:the|a|an|his|her|their"
        rf"|[a-z]+'s) {_REL}\b",
        r"\bi (?:handle|manage|take care of|pay|look after|deal with|help with|do)"
        r" (?:his|her|their|all (?:his|her|their)) (?:bills|finances|affairs|mail|accounts|money"
        r"|paperwork|calls)\b",
        r"\bon (?:his|her|their) behalf\b|\bon behalf of\b|\bpower of attorney\b",
        r"\b(?:calling|answering|speaking) for (?:him|her|them)\b",
        r"\bfor (?:him|her) (?:today|now)\b",
        r"\bi am not (?:him|her|the one|that person)\b",
        r"\b(?:he|she|they) (?:is|are) (?:just |actually |currently |still |not )?"
        r"(?:not (?:here|home|in|available|around)|out|away|"
        r"at work|at school|sleeping|asleep|busy|unavailable|in the shower|working|"
        r"out of town|on vacation|at the store)\b",
        r"\b(?:can|may) i take a message\b|\bi can take a message\b",
        r"\b(?:he|she|they) (?:will|should) be (?:back|home)\b",
        r"\bi will (?:tell|let) (?:him|her|them)\b|\bi will give (?:him|her|them) the message\b",
    ),
    *_rules(
        Intent.RECORDING_OBJECTION,
        r"\b(?:do not|stop|quit|no|please do not) (?:record|recording|transcrib)\w*",
        r"\b(?:do not|not) (?:consent|agree|want|like)\w* (?:to )?"
        r"(?:be |being |this |it |the call |this call |this conversation )?(?:being |to be )?"
        r"(?:recorded|record|recording|transcribed|transcription|transcribing)\b",
        r"\b(?:turn|switch|shut) off (?:the )?(?:recording|recorder|transcri\w*)\b",
        r"\bobject to (?:the |being |this |this being )?(?:record|transcri)\w*",
        r"\b(?:without|do not give you|not give you) (?:my )?(?:consent|permission)\b",
    ),
    *_rules(
        Intent.ARREST_OR_SUIT_QUESTION,
        r"\barrest\w*|\bjail\b|\bprison\b|\bpolice\b|\bwarrant\b|\block(?:ed)? (?:me )?up\b",
        r"\bcriminal\b|\bprosecut\w*|\blawsuit\b|\blegal action\b|\bcourt\b|\bgarnish\w*",
        r"(?<!this is )(?<!it is )(?<!i am )(?<!name is )\bsue\b|\bsued\b|\bsuing\b",
        r"\bseize\w*|\brepossess\w*|\btake my (?:house|car|wages|paycheck|home)\b",
        negatable=False,
    ),
    *_rules(
        Intent.REFUSAL,
        r"\bi (?:am not|will not|refuse to|am never|will never|do not want to|am not going to"
        r"|have no intention of|do not intend to) (?:going to )?(?:pay|paying|give you)\b",
        r"\bnot (?:paying|going to pay)(?: (?:you|that|this|it|anything|a (?:dime|cent|penny)))?\b",
        r"\bi refuse\b|\bforget it\b|\bno way (?:i am|am i|i will)\b|\bnot a (?:dime|cent|penny)\b",
        r"\bnot (?:getting|seeing|paying|giving you) (?:a|one) (?:single )?(?:dime|cent|penny)\b",
        r"\bi (?:said|told you) no\b",
        r"\bi do not want to (?:pay|make (?:a|any) payments?|settle)\b",
        negatable=False,
    ),
    *_rules(
        Intent.WHO_IS_CALLING,
        r"\bwho (?:is|are) (?:this|you|calling|it|speaking)\b|\bwho am i (?:talking|speaking) to\b",
        r"\b(?:what|which) (?:company|business|firm|organi[sz]ation)\b",
        r"\bwhere (?:are you|is this) (?:calling )?from\b|\bwho do you (?:work for|represent)\b",
        r"\bwho is on the (?:line|phone)\b|\bwhat is your name\b",
        negatable=False,
    ),
    *_rules(
        Intent.WHAT_ABOUT,
        r"\bwhat (?:is|was) (?:this|it|that|the call) (?:about|regarding|for|concerning)\b",
        r"\bwhat (?:do|did) you want\b|\bwhy (?:are|were) you calling\b|\bwhat is this\b",
        r"\bwhat (?:is|was) (?:this|it) in (?:regards?|reference) to\b",
        r"\bwhat (?:are|were) you calling about\b|\bwhat is the call about\b",
        negatable=False,
    ),
    *_rules(
        Intent.AT_WORK,
        r"\bi am (?:currently |still |actually )?(?:at|in) (?:work|the office|my job)\b",
        r"\b(?:i am|i am currently) working\b(?! on)",
        negatable=False,
    ),
    *_rules(
        Intent.WORKPLACE_FORBIDS_CALLS,
        r"\b(?:can not|am not allowed to|am not supposed to|not allowed to|may not|do not)"
        r" (?:take|have|answer|get) (?:personal |phone |these )?(?:calls?|phone calls?)"
        r" (?:at|during|while at|from) (?:work|my job|the office)\b",
        r"\b(?:my )?(?:employer|boss|job|work|company|manager)"
        r" (?:does not|do not|will not|won't) (?:allow|let|permit)\b",
        r"\b(?:do not|never|stop|no) (?:call|calling|contact\w*) (?:me )?"
        r"(?:at|during|while i am at)"
        r" (?:work|my job|the office|my work)\b",
        r"\b(?:not|no) (?:allowed|permitted) (?:calls|phone calls|personal calls) at work\b",
        negatable=False,
    ),
]

# An answering machine's greeting (rule C10): only a limited-content message may follow.
_VOICEMAIL_RE = re.compile(
    r"\b(?:after|at) the (?:tone|beep)\b|\byou (?:have|ve) reached\b"
    r"|\bleave (?:me |us )?(?:a |your )?(?:brief |short )?(?:message|name and number)\b"
    r"|\b(?:not available|unable|can not|not able) to (?:take|answer|come to) (?:your|the|my) "
    r"(?:call|phone)\b|\bthe (?:person|number|party|subscriber|customer|wireless customer) you "
    r"(?:are calling|are trying to reach|have dialed|have called|dialed|called)\b"
    r"|\bmailbox\b|\bvoice ?mail ?box\b|\brecord your message\b"
)
_STOP_ALONE_RE = re.compile(r"^(?:(?:please|just|now|stop|it|ok|okay)\s*)*$")

_YES_RE = re.compile(
    rf"^{_FILLERS}(?:yes|yeah|yep|yup|yea|ya|yah|sure|correct|absolutely|definitely|certainly"
    r"|of course(?! not)|uh huh|mm hmm|affirmative|indeed|exactly|you bet|right(?! now| away)"
    r"|(?:that )?sounds (?:good|great|fair|fine|ok|okay|right)|that is fair"
    r"|that is (?:right|correct|true|fine)|that works|that would work|perfect"
    r"|no problem|that is me|it is me|(?:speaking|this is (?:he|she|him|her))(?=\s*$))\b"
)
_EXPLICIT_YES_RE = re.compile(
    rf"^{_FILLERS}(?:yes|yeah|yep|yup|correct|that is (?:right|correct)|that is correct"
    r"|(?:yes )?that is right|right|exactly|absolutely|i confirm|confirmed|affirmative)(?:\W|$)"
    r"(?!.*\b(?:but|not|no|wait|actually|change)\b)"
)
_YES_CONFIRM_RE = re.compile(
    rf"^{_FILLERS}(?:okay|ok|alright|all right|fine|i do|i will|i can|i am|i did|i have|go ahead"
    r"|please do|do it|let us do it|works for me|that is good|good|great)(?! not)\b"
)
_YES_IDENTITY_RE = re.compile(
    rf"^{_FILLERS}(?:speaking|this is (?:he|she|him|her|me)|that is me|it is me|that would be me"
    r"|you got (?:him|her|me|it|the right person)|you found (?:him|her|me)"
    r"|you are (?:speaking|talking) (?:to|with) (?:him|her|me)|i am (?:he|she|him|her)"
    r"|(?:i am|this is|it is) (?:the )?account holder)\b"
)
_NO_RE = re.compile(
    rf"^{_FILLERS}(?:(?:yeah|yes|yep|ok|okay) )?"
    r"(?:no(?! problem| worries| doubt| one| body)|nope|nah|negative|not really"
    r"|absolutely not|of course not|definitely not|i do not think so|not at all|no way"
    r"|i would rather not|not me)\b"
)


def _intents(clauses: list[str], whole: str) -> set[Intent]:
    found: set[Intent] = set()
    for clause in clauses:
        for rule in _INTENT_RULES:
            if rule.intent in found:
                continue
            for m in rule.pattern.finditer(clause):
                if not rule.negatable or not negated(clause, m.start()):
                    found.add(rule.intent)
                    break
    bare = re.sub(r"[^a-z ]", "", whole).strip()
    if bare and _STOP_ALONE_RE.match(bare) and "stop" in bare:
        found.add(Intent.STOP_CALLING)
    if Intent.CEASE in found:
        # A request to stop all contact is at least a request to stop calling.
        found.add(Intent.STOP_CALLING)
    if Intent.PAY_IN_FULL in found:
        found.discard(Intent.PAYMENT_OFFER)
    return found


def _yes_no(clauses: list[str], expecting: Expectation | None) -> Intent | None:
    """The last yes or no in the turn ("yeah, no" is a no). To a read-back only a
    clear yes counts: "okay", "uh huh" or "sure" may only mean "I hear you"."""
    answer: Intent | None = None
    for clause in clauses:
        if _NO_RE.match(clause):
            answer = Intent.NO
        elif expecting is Expectation.EXPLICIT_YES:
            if _EXPLICIT_YES_RE.match(clause):
                answer = Intent.YES
        elif _YES_RE.match(clause):
            answer = Intent.YES
        elif expecting is Expectation.IDENTITY and _YES_IDENTITY_RE.match(clause):
            answer = Intent.YES
        elif expecting in (Expectation.CONFIRM, Expectation.RECORDING_CONSENT) and (
            _YES_CONFIRM_RE.match(clause)
        ):
            answer = Intent.YES
    return answer


# -- tokens and numbers -------------------------------------------------------------


_NAME_WORD = r"[A-Z][a-zA-Z'\-]+"
_TITLES = r"(?:(?:Mr|Mrs|Ms|Miss|Dr|Mister)\.?\s+)?"
_NAME_STOP = {
    *"""Yes Yeah Yep No Nope Hi Hello Hey Speaking This It I Sir Ma'am Okay Ok Well Oh The He She
    His Her Here Sure Um Uh Who What Why Speak And But Not Just Is Correct Right Thanks Thank
    Please Sorry Good Fine Calling Jr Sr Robot Busy Driving Available Home Out AI Am Are
    You Wait Hmm Hm Huh Mm Eh Ah Uh Um Pardon Excuse Hang Hold Yo Nah What Who Where When How
    Why Listen Look See Alright Maybe Perhaps Again Me Him""".split(),
    *(m.capitalize() for m in MONTHS),
    *(d.capitalize() for d in WEEKDAYS),
}
_NAME_AFTER_RE = re.compile(
    r"(?i:\b(?:my name is|my name's|the name is|name's|you are speaking with|you're speaking with"
    r"|you are talking to|you're talking to|this is|it is|it's|i am|i'm))\s+"
    rf"{_TITLES}(?P<name>{_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}})"
)
_NAME_LOWER_RE = re.compile(
    r"(?i:\b(?:my name is|my name's|the name is))\s+(?P<name>[a-z][a-z'\-]+(?:\s+[a-z][a-z'\-]+)?)"
)
_NAME_BEFORE_RE = re.compile(
    rf"{_TITLES}(?P<name>{_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}}),?\s+(?i:speaking|here)\b"
)
_NAME_ALONE_RE = re.compile(
    rf"^\W*(?:(?i:yes|yeah|yep|this is|it's|it is)\W+)?{_TITLES}"
    rf"(?P<name>{_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}})\W*$"
)
_NOT_NAMES_LOWER = set("not sorry busy driving here his her their the a an he she him me".split())


def _clean_name(raw: str, *, lower_ok: bool = False) -> str | None:
    words = raw.split()
    while words and words[0] in _NAME_STOP:
        words.pop(0)
    cut = next((i for i, w in enumerate(words) if w in _NAME_STOP), len(words))
    words = words[:cut]
    if not words or any(w.endswith("'s") for w in words):
        return None
    if lower_ok and words[0].lower() in _NOT_NAMES_LOWER:
        return None
    if lower_ok:
        words = [w[:1].upper() + w[1:] for w in words if w.lower() not in _NOT_NAMES_LOWER]
    return " ".join(words) or None


def _name(text: str, expecting: Expectation | None) -> str | None:
    for pattern, lower_ok in (
        (_NAME_AFTER_RE, False),
        (_NAME_LOWER_RE, True),
        (_NAME_BEFORE_RE, False),
    ):
        for m in pattern.finditer(text):
            tail = text[m.end() :].lstrip()
            if tail.startswith("'s"):
                continue
            name = _clean_name(m.group("name"), lower_ok=lower_ok)
            if name:
                return name
    if expecting in (Expectation.IDENTITY, Expectation.NAME):
        alone = _NAME_ALONE_RE.match(text.strip())
        if alone:
            return _clean_name(alone.group("name"))
    return None


_METHOD_RULES: list[tuple[re.Pattern[str], PaymentMethod]] = [
    (re.compile(r"\bdebit card\b"), PaymentMethod.DEBIT_CARD),
    (
        re.compile(
            r"\bcredit card\b|\b(?:visa|master ?card|amex|american express|discover card)\b"
        ),
        PaymentMethod.CREDIT_CARD,
    ),
    (
        re.compile(
            r"\bach\b|\bbank (?:transfer|account|draft|wire)\b|\bchecking(?: account)?\b"
            r"|\bsavings account\b|\brouting number\b|\be ?check\b|\bdirect debit\b"
            r"|\belectronic (?:check|transfer)\b|\bfrom my bank\b|\bwire transfer\b"
        ),
        PaymentMethod.BANK_TRANSFER,
    ),
    (
        re.compile(
            r"\b(?:a|by|with|personal|paper|mail|send|write|cashier's|certified)"
            r" (?:a )?(?:check|cheque)s?\b"
            r"|^(?:a )?(?:check|cheque)\W*$"
        ),
        PaymentMethod.CHECK,
    ),
    (re.compile(r"\bmoney order\b"), PaymentMethod.MONEY_ORDER),
    (re.compile(r"\bcard\b"), PaymentMethod.CARD),
    (re.compile(r"\bdebit\b"), PaymentMethod.DEBIT_CARD),
]


#: "check" alone, as an answer to how one will pay ("Friday, check."), not "let me check".
_BARE_CHECK_RE = re.compile(
    r"(?<!let me )(?<!i will )(?<!i have to )(?<!to )\b(?:check|cheque)\b"
    r"(?! (?:on|with|my|that|if|it|and see|back))"
)


def _method(normalized: str, expecting: Expectation | None) -> PaymentMethod | None:
    for pattern, method in _METHOD_RULES:
        if pattern.search(normalized):
            return method
    if expecting in (Expectation.METHOD, Expectation.DATE) and _BARE_CHECK_RE.search(normalized):
        return PaymentMethod.CHECK
    return None


# -- who is speaking, and the terms said (the policy's C3, C8, C13 inputs) ----------

_BENIGN_THIRD_PERSON_RE = re.compile(
    r"\b(?:this is|it is|that is|yes|yeah) (?:he|she|him|her)\b|\b(?:he|she) speaking\b"
)
_THIRD_PERSON_RE = re.compile(
    rf"\b(?:he|she|him|his|hers|himself|herself)\b|\bher\b|\b(?:their|your) {_REL}\b"
    rf"|\b{_REL}'s\b|\b[a-z]+'s (?:phone|number|cell|account|bill|bills|debt|loan|card|mail)\b"
)
_PARTIAL_RE = re.compile(
    r"\b(?:part|parts|some|rest|portion|fees?|interest|charges?|only|all of it|the whole"
    r"|too high|extra|that much|not all)\b"
)


_ATTORNEY_NAME_RE = re.compile(
    r"(?i:\b(?:lawyer|attorney|counsel)(?:'s name)?(?:\s+is|\s+named|\s+called|,)?)\s+"
    rf"{_TITLES}(?P<name>{_NAME_WORD}(?:\s+{_NAME_WORD})?)"
    r"|(?P<name2>" + _NAME_WORD + r"(?:\s+" + _NAME_WORD + r")?),?\s+(?i:is my (?:lawyer|attorney))"
)


def _third_person(normalized: str) -> bool:
    """Whether the speaker talks of another person or as one (C3 fails closed on it)."""
    return _THIRD_PERSON_RE.search(_BENIGN_THIRD_PERSON_RE.sub(" ", normalized)) is not None


def _attorney_name(redacted: str) -> str | None:
    for m in _ATTORNEY_NAME_RE.finditer(redacted):
        name = _clean_name(m.group("name") or m.group("name2") or "")
        if name:
            return name
    return None


# -- the reading -------------------------------------------------------------------------

_CARD_MARKERS = (CARD_REMOVED, EXPIRY_REMOVED, CODE_REMOVED)
#: The markers as they read once normalised: their words ("card") are not the caller's.
_MARKERS_RE = re.compile("|".join(re.escape(m.lower()) for m in _CARD_MARKERS))
_AMOUNT_EXPECTED = (Expectation.AMOUNT, Expectation.MONTHLY_AMOUNT, Expectation.ONE_OR_MONTHLY)


def _dates_said(
    toks: list[Tok], nums: list[Num], today: dt.date, expecting: Expectation | None, taken: set[int]
) -> tuple[dt.date | None, dt.date | None, bool]:
    """The day named, the date of birth, and whether only part of a date of birth was given.

    ``taken`` holds the tokens of the last four, if given: dates over them are skipped. The
    tokens of the dates read are added to it, so they are not read as money as well."""
    last4_said = bool(taken)
    dates: list[Date] = [
        d
        for d in read_dates(toks, nums, today, expecting is Expectation.DATE)
        if not taken.intersection(d.tokens)
    ]
    date_of_birth: dt.date | None = None
    day: dt.date | None = None
    partial_date = False
    birth_cue = any(t.text in BIRTH_CUES for t in toks) or expecting is Expectation.DATE_OF_BIRTH
    for found in dates:
        taken.update(found.tokens)
        is_birth = found.has_year and (
            birth_cue or (found.day < today and found.day.year <= today.year - 10)
        )
        if is_birth:
            date_of_birth = found.day  # the last one said: "the fifth, no, the sixth"
        elif expecting is Expectation.DATE_OF_BIRTH:
            partial_date = True
        elif day is None:
            day = found.day
    if date_of_birth is None and birth_cue and not last4_said:
        date_of_birth, partial = spoken_birth_date(toks, today)
        partial_date = partial_date or partial
    return day, date_of_birth, partial_date and date_of_birth is None


def _answer(intents: set[Intent], clauses: list[str], expecting: Expectation | None) -> None:
    """Add the yes or no the turn gives, read against the question asked."""
    answer = _yes_no(clauses, expecting)
    if answer is not None:
        intents.add(answer)
    if expecting is Expectation.IDENTITY and intents & {
        Intent.THIRD_PARTY,
        Intent.WRONG_NUMBER,
        Intent.DECEASED,
    }:
        # A name alone is no "yes": the policy compares it with the consumer's (C3).
        intents.discard(Intent.YES)
        intents.add(Intent.NO)
    if expecting is Expectation.RECORDING_CONSENT and Intent.NO in intents:
        intents.add(Intent.RECORDING_OBJECTION)


def understand(
    text: str, *, expecting: Expectation | None = None, today: dt.date | None = None
) -> Understanding:
    """Read one caller turn: intents and facts, with card data removed first."""
    today = today or dt.date.today()
    redacted, removed = redact_card_numbers(text)
    normalized = normalize(redacted)
    clauses = clauses_of(normalized)
    intents = _intents(clauses, normalized)
    if removed or any(marker in redacted for marker in _CARD_MARKERS):
        intents.add(Intent.CARD_NUMBER)

    toks = tokenize(normalized)
    nums = read_numbers(toks)
    last4, taken = last_four(toks, expecting is Expectation.LAST4)
    day, date_of_birth, partial_date = _dates_said(toks, nums, today, expecting, taken)

    found_money = read_money(toks, nums, expecting in _AMOUNT_EXPECTED, taken)
    money = choose_money(found_money)
    discount_pct = discount(normalized)
    offered = money is not None and money.offered and not money.negated
    if (offered or discount_pct is not None) and Intent.PAY_IN_FULL not in intents:
        intents.add(Intent.PAYMENT_OFFER)
    time, relation = time_named(normalized)
    _answer(intents, clauses, expecting)

    return Understanding(
        intents=frozenset(intents),
        amount_cents=money.cents if money else None,
        date=day,
        name=_name(redacted, expecting),
        date_of_birth=date_of_birth,
        last4=last4,
        method=_method(_MARKERS_RE.sub(" ", normalized), expecting),
        discount_pct=discount_pct,
        monthly=money is not None and money.per == "month",
        per=money.per if money else None,
        voicemail=_VOICEMAIL_RE.search(normalized) is not None,
        text=redacted,
        third_person=_third_person(normalized),
        partial_dispute=Intent.DISPUTE in intents and _PARTIAL_RE.search(normalized) is not None,
        once=said_once(normalized),
        installments=installments(normalized),
        amounts_ambiguous=amounts_ambiguous(found_money, normalized),
        time=time,
        time_relation=relation,
        phone_number=phone_number(redacted),
        attorney_name=_attorney_name(redacted) if Intent.ATTORNEY in intents else None,
        partial_date=partial_date,
    )
