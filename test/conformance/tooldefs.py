"""A realistic set of tool definitions, in the neutral form both formats
share (name, description, JSON Schema): nested objects, $defs and $ref,
enums, arrays of objects, nullable types, unicode and descriptions of
several kilobytes, as agent frameworks send them.
"""

from __future__ import annotations

_CITIES = [
    ("Zürich", "Europe/Zurich", "CHF"),
    ("São Paulo", "America/Sao_Paulo", "BRL"),
    ("東京", "Asia/Tokyo", "JPY"),
    ("Москва", "Europe/Moscow", "RUB"),
    ("القاهرة", "Africa/Cairo", "EGP"),
    ("Reykjavík", "Atlantic/Reykjavik", "ISK"),
    ("서울", "Asia/Seoul", "KRW"),
    ("Kraków", "Europe/Warsaw", "PLN"),
    ("मुंबई", "Asia/Kolkata", "INR"),
    ("Αθήνα", "Europe/Athens", "EUR"),
]


def _calendar_description() -> str:
    parts = [
        "Create an event in the user's calendar, or update one the user already has when `event_id` is given.\n\n",
        "Use this tool whenever the user asks to schedule, book, plan, move or reschedule a meeting, call, ",
        "appointment, reminder, trip or any other time-bound activity. Do not use it to answer questions about ",
        "existing events (use `search_calendar` for that) and never invent attendees the user did not mention.\n\n",
        "## Times\n",
        "* `start` and `end` are ISO 8601 local date-times **without** an offset, e.g. `2025-03-14T09:30:00`; ",
        "the offset comes from `time_zone`, an IANA zone name. When the user gives a time in another zone than ",
        "their own (\"3 pm Tokyo time\"), set `time_zone` to that zone; the calendar converts for every attendee.\n",
        "* All-day events set `all_day: true` and use dates (`2025-03-14`) for `start` and `end`; `end` is exclusive.\n",
        "* If the user gives only a duration, compute `end` from `start`. If they give neither, default to 30 minutes ",
        "for calls and 60 minutes for meetings, and say so in your reply.\n\n",
        "## Attendees\n",
        "Each attendee is an object with `email` (required), `name`, `role` and `response`. Roles: `required` (the ",
        "default), `optional`, `resource` (a room or a piece of equipment, whose email is the resource calendar's ",
        "address) and `organizer` (at most one; defaults to the user).\n\n",
        "## Recurrence\n",
        "`recurrence` follows RFC 5545 semantics in structured form: `frequency`, `interval`, `by_day` (two-letter ",
        "weekday codes, optionally prefixed by an ordinal such as `1MO` or `-1FR`), `count` or `until` (never both). ",
        "Exceptions to a series are listed in `exdates`.\n\n",
        "## Reminders\n",
        "`reminders` is a list of `{method, minutes_before}`; methods are `popup`, `email` and `sms`. At most five.\n\n",
        "## Locations and time zones used by this organisation\n",
        "The organisation has offices in the following cities; when the user names one, use the office's time zone ",
        "and put the city in `location.name`. Prices for paid rooms are in the local currency.\n",
    ]
    for city, tz, cur in _CITIES:
        for floor in range(1, 4):
            parts.append(
                f"* {city}, floor {floor}: rooms «{city} {floor}01» to «{city} {floor}12», zone `{tz}`, "
                f"video-enabled rooms end in 1 or 2, paid rooms bill in {cur} — book them through `resource` attendees.\n"
            )
    parts.append(
        "\nIf the request is ambiguous (two possible dates, an unknown attendee, a room that does not exist), "
        "ask the user instead of guessing. Quote the event's title exactly as the user wrote it, emoji included 🎉."
    )
    return "".join(parts)


def _flights_description() -> str:
    lines = [
        "Search scheduled flights between airports and return fares the user can book.\n\n",
        "Airports are IATA codes (three capital letters). Cities with several airports may be given as their city ",
        "code (LON, NYC, TYO, PAR, MIL, STO, BUE, SAO, RIO, OSA, SEL, MOW, WAS, CHI, YTO, YMQ, BJS, SHA, JKT, BKK).\n",
        "Each element of `segments` is one leg; a round trip is two legs, an open jaw or a multi-city trip more.\n\n",
        "Passengers: `adults` (12+), `children` (2-11) and `infants` (under 2, on a lap; at most one per adult).\n",
        "Cabins, from cheapest: economy, premium_economy, business, first. `max_stops` 0 means non-stop only.\n\n",
        "Fare rules the user often asks about, to be read from the result rather than assumed:\n",
    ]
    rules = [
        ("refundable", "the fare can be refunded to the original form of payment, minus any fee shown"),
        ("changeable", "dates and times can be changed, paying the fare difference and any fee shown"),
        ("checked_bags", "the number of checked bags included, each up to 23 kg unless stated"),
        ("seat_selection", "whether a seat can be chosen at booking without an extra charge"),
        ("upgradeable", "whether the fare can be upgraded with miles or a paid upgrade"),
    ]
    for k, v in rules:
        for cabin in ("economy", "premium_economy", "business", "first"):
            lines.append(f"- `{k}` ({cabin}): {v}; in {cabin} this varies by carrier and by fare brand.\n")
    lines.append("\nNever book anything with this tool: it only searches. Prices are per passenger, taxes included — «tout compris».")
    return "".join(lines)


CALENDAR_SCHEMA = {
    "type": "object",
    "$defs": {
        "attendee": {
            "type": "object",
            "properties": {
                "email": {"type": "string", "format": "email"},
                "name": {"type": "string", "description": "Display name, e.g. «Zoë Åkesson»"},
                "role": {"type": "string", "enum": ["required", "optional", "resource", "organizer"], "default": "required"},
                "response": {"type": "string", "enum": ["needs_action", "accepted", "declined", "tentative"]},
            },
            "required": ["email"],
            "additionalProperties": False,
        },
        "reminder": {
            "type": "object",
            "properties": {
                "method": {"type": "string", "enum": ["popup", "email", "sms"]},
                "minutes_before": {"type": "integer", "minimum": 0, "maximum": 40320},
            },
            "required": ["method", "minutes_before"],
        },
        "recurrence": {
            "type": "object",
            "properties": {
                "frequency": {"type": "string", "enum": ["daily", "weekly", "monthly", "yearly"]},
                "interval": {"type": "integer", "minimum": 1, "default": 1},
                "by_day": {
                    "type": "array",
                    "items": {"type": "string", "pattern": "^(-?[1-5])?(MO|TU|WE|TH|FR|SA|SU)$"},
                    "uniqueItems": True,
                },
                "count": {"type": "integer", "minimum": 1},
                "until": {"type": "string", "format": "date"},
                "exdates": {"type": "array", "items": {"type": "string", "format": "date"}},
            },
            "required": ["frequency"],
            "not": {"required": ["count", "until"]},
        },
    },
    "properties": {
        "title": {"type": "string", "minLength": 1, "maxLength": 256},
        "event_id": {"type": ["string", "null"], "description": "Set to update an existing event."},
        "start": {"type": "string", "description": "Local date-time or date; see the description."},
        "end": {"type": "string"},
        "all_day": {"type": "boolean", "default": False},
        "time_zone": {"type": "string", "examples": [tz for _, tz, _ in _CITIES]},
        "location": {
            "oneOf": [
                {"type": "object", "properties": {"name": {"type": "string"}, "address": {"type": "string"}}, "required": ["name"]},
                {"type": "object", "properties": {"video_url": {"type": "string", "format": "uri"}}, "required": ["video_url"]},
            ]
        },
        "attendees": {"type": "array", "items": {"$ref": "#/$defs/attendee"}, "maxItems": 200},
        "reminders": {"type": "array", "items": {"$ref": "#/$defs/reminder"}, "maxItems": 5},
        "recurrence": {"$ref": "#/$defs/recurrence"},
        "visibility": {"type": "string", "enum": ["default", "public", "private", "confidential"]},
        "priority": {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": 0.25},
        "notes": {"type": "string", "description": "Free text; markdown allowed: **bold**, _italic_, `code`, \"quotes\", back\\slash."},
    },
    "required": ["title", "start", "time_zone", "all_day", "visibility"],
    "additionalProperties": False,
}

FLIGHTS_SCHEMA = {
    "type": "object",
    "properties": {
        "segments": {
            "type": "array",
            "minItems": 1,
            "maxItems": 6,
            "items": {
                "type": "object",
                "properties": {
                    "from": {"type": "string", "pattern": "^[A-Z]{3}$"},
                    "to": {"type": "string", "pattern": "^[A-Z]{3}$"},
                    "date": {"type": "string", "format": "date"},
                    "time_window": {
                        "type": "object",
                        "properties": {"earliest": {"type": "string"}, "latest": {"type": "string"}},
                    },
                },
                "required": ["from", "to", "date"],
            },
        },
        "passengers": {
            "type": "object",
            "properties": {
                "adults": {"type": "integer", "minimum": 1, "maximum": 9},
                "children": {"type": "integer", "minimum": 0},
                "infants": {"type": "integer", "minimum": 0},
            },
            "required": ["adults"],
        },
        "cabin": {"type": "string", "enum": ["economy", "premium_economy", "business", "first"]},
        "max_stops": {"type": ["integer", "null"], "minimum": 0, "maximum": 3},
        "carriers": {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 2}},
        "currency": {"type": "string", "enum": sorted({c for _, _, c in _CITIES} | {"USD", "GBP"})},
    },
    "required": ["segments", "passengers", "cabin"],
}

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City and country, e.g. «Zürich, CH»"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location"],
}

TOOLS = [
    {"name": "create_calendar_event", "description": _calendar_description(), "schema": CALENDAR_SCHEMA},
    {"name": "search_flights", "description": _flights_description(), "schema": FLIGHTS_SCHEMA},
    {"name": "get_weather", "description": "Current weather for a place. Météo actuelle. 現在の天気。", "schema": WEATHER_SCHEMA},
]

# The arguments the fake vendor builds for the first tool from its schema
# (cmd/fakevendor/reply.go, toolArguments): each required property gets the
# first value of its enum or a fixed value of its type.
FIRST_TOOL_ARGUMENTS = {
    "title": "Paris",
    "start": "Paris",
    "time_zone": "Paris",
    "all_day": True,
    "visibility": "default",
}


def alpha_tools() -> list[dict]:
    """The tools as the messages format defines them."""
    return [{"name": t["name"], "description": t["description"], "input_schema": t["schema"]} for t in TOOLS]


def beta_tools() -> list[dict]:
    """The tools as the chat-completions format defines them."""
    return [
        {"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["schema"]}}
        for t in TOOLS
    ]
