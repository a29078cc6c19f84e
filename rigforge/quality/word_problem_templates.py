"""The templates of rigforge's own grade-school word problems (rigforge/quality/word_problems.py makes the set).

Each template draws its numbers from ``rng`` and returns the question, the worked steps and the whole-number
answer, computed here rather than typed: two to four steps of whole-number arithmetic, as in GSM8K (every
division is exact, every amount stays positive). The wording is this project's own and ships under its licence.

Example::

    question, steps, answer = bakery(Random(1), "Ana")
"""

from __future__ import annotations

from collections.abc import Callable
from random import Random

Made = tuple[str, list[str], int]
Template = Callable[[Random, str], Made]


def bakery(rng: Random, name: str) -> Made:
    trays, per_tray = rng.randint(3, 9), rng.randint(6, 24)
    baked = trays * per_tray
    morning, afternoon = rng.randint(1, baked // 3), rng.randint(1, baked // 3)
    return (f"{name} bakes {trays} trays of {per_tray} muffins. {name} sells {morning} muffins in the morning and "
            f"{afternoon} in the afternoon. How many muffins are left?",
            [f"{trays} trays of {per_tray} make {trays} * {per_tray} = {baked} muffins.",
             f"{morning} + {afternoon} = {morning + afternoon} were sold.",
             f"{baked} - {morning + afternoon} = {baked - morning - afternoon} are left."],
            baked - morning - afternoon)


def savings(rng: Random, name: str) -> Made:
    weekly, weeks = rng.randint(5, 40), rng.randint(4, 20)
    saved = weekly * weeks
    spent = rng.randint(1, saved - 1)
    return (f"{name} saves ${weekly} every week for {weeks} weeks, then spends ${spent} on a bicycle. How many "
            "dollars are left?",
            [f"{name} saves {weekly} * {weeks} = {saved} dollars.",
             f"{saved} - {spent} = {saved - spent} dollars are left."],
            saved - spent)


def garden(rng: Random, name: str) -> Made:
    rows, per_row = rng.randint(4, 15), rng.randint(5, 20)
    planted = rows * per_row
    died, added = rng.randint(1, planted // 4), rng.randint(1, 30)
    return (f"{name}'s garden has {rows} rows of {per_row} tomato plants. {died} plants die, and {name} plants "
            f"{added} new ones. How many tomato plants are in the garden now?",
            [f"There were {rows} * {per_row} = {planted} plants.",
             f"After {died} die, {planted} - {died} = {planted - died} remain.",
             f"With {added} new ones: {planted - died} + {added} = {planted - died + added}."],
            planted - died + added)


def road_trip(rng: Random, name: str) -> Made:
    speed1, hours1, speed2, hours2 = rng.randint(40, 70), rng.randint(2, 5), rng.randint(20, 45), rng.randint(1, 4)
    first, second = speed1 * hours1, speed2 * hours2
    return (f"{name} drives at {speed1} miles per hour for {hours1} hours, then at {speed2} miles per hour for "
            f"{hours2} hours. How many miles does {name} drive in all?",
            [f"First {speed1} * {hours1} = {first} miles.", f"Then {speed2} * {hours2} = {second} miles.",
             f"In all {first} + {second} = {first + second} miles."], first + second)


def reading(rng: Random, name: str) -> Made:
    per_day, days = rng.randint(8, 40), rng.randint(3, 12)
    read = per_day * days
    pages = read + rng.randint(10, 300)
    return (f"A book has {pages} pages. {name} reads {per_day} pages every day for {days} days. How many pages "
            "are still unread?",
            [f"{name} reads {per_day} * {days} = {read} pages.",
             f"{pages} - {read} = {pages - read} pages are unread."],
            pages - read)


def pizza(rng: Random, name: str) -> Made:
    people, each = rng.randint(3, 9), rng.randint(2, 6)
    slices = rng.choice([6, 8, 10, 12])
    total = people * each * slices  # pizzas = people * each: every slice shared out evenly
    pizzas = total // slices
    return (f"{name} orders {pizzas} pizzas, each cut into {slices} slices, and shares them equally among "
            f"{people * slices} guests. How many slices does each guest get?",
            [f"{pizzas} pizzas of {slices} slices are {pizzas} * {slices} = {total} slices.",
             f"{total} / {people * slices} = {total // (people * slices)} slices each."], total // (people * slices))


def stationery(rng: Random, name: str) -> Made:
    notebooks, notebook_price = rng.randint(2, 8), rng.randint(2, 9)
    pens, pen_price = rng.randint(2, 10), rng.randint(1, 4)
    cost = notebooks * notebook_price + pens * pen_price
    paid = next(bill for bill in (20, 50, 100, 200) if bill > cost)
    return (f"{name} buys {notebooks} notebooks at ${notebook_price} each and {pens} pens at ${pen_price} each, "
            f"and pays with a ${paid} bill. How many dollars of change does {name} get?",
            [f"Notebooks: {notebooks} * {notebook_price} = {notebooks * notebook_price} dollars.",
             f"Pens: {pens} * {pen_price} = {pens * pen_price} dollars.", f"Together {cost} dollars.",
             f"Change: {paid} - {cost} = {paid - cost} dollars."], paid - cost)


def ages(rng: Random, name: str) -> Made:
    younger, gap, years = rng.randint(5, 30), rng.randint(2, 15), rng.randint(2, 10)
    return (f"{name} is {gap} years older than a cousin who is {younger} years old. In {years} years, what will "
            f"{name}'s and the cousin's ages add up to?",
            [f"{name} is {younger} + {gap} = {younger + gap} now.",
             f"In {years} years: {younger + gap + years} and {younger + years}.",
             f"{younger + gap + years} + {younger + years} = {2 * younger + gap + 2 * years}."],
            2 * younger + gap + 2 * years)


def sale(rng: Random, name: str) -> Made:
    price, off = rng.randint(2, 12) * 20, rng.choice([10, 20, 25, 50])
    each = price * (100 - off) // 100
    return (f"A jacket costs ${price}. It is on sale at {off}% off. {name} buys 2 jackets. How many dollars does "
            f"{name} pay?",
            [f"{off}% of {price} is {price * off // 100} dollars.",
             f"Each costs {price} - {price * off // 100} = {each}.",
             f"Two cost 2 * {each} = {2 * each} dollars."], 2 * each)


def overtime(rng: Random, name: str) -> Made:
    wage, hours = rng.randint(5, 20) * 2, rng.randint(41, 55)
    extra = hours - 40
    return (f"{name} earns ${wage} an hour for the first 40 hours of a week and one and a half times that for every "
            f"hour after 40. {name} works {hours} hours this week. How many dollars does {name} earn?",
            [f"40 * {wage} = {40 * wage} dollars for the first 40 hours.",
             f"Overtime pays {wage} * 3 / 2 = {wage * 3 // 2} an hour for {extra} hours: {extra * wage * 3 // 2}.",
             f"In all {40 * wage} + {extra * wage * 3 // 2} = {40 * wage + extra * wage * 3 // 2}."],
            40 * wage + extra * wage * 3 // 2)


def school_bus(rng: Random, name: str) -> Made:
    classes, size, percent = rng.randint(3, 12), rng.choice([20, 25, 30]), rng.choice([20, 40, 60, 80])
    students = classes * size
    riders = students * percent // 100
    return (f"{name}'s school has {classes} classes of {size} students. {percent}% of the students ride the bus. "
            "How many students do not ride the bus?",
            [f"There are {classes} * {size} = {students} students.", f"{percent}% of {students} is {riders}.",
             f"{students} - {riders} = {students - riders} do not ride the bus."], students - riders)


def fuel(rng: Random, name: str) -> Made:
    per_gallon, gallons, price = rng.randint(15, 35), rng.randint(4, 20), rng.randint(3, 6)
    miles = per_gallon * gallons
    return (f"{name}'s truck goes {per_gallon} miles on one gallon of fuel. Fuel costs ${price} a gallon. How many "
            f"dollars of fuel does a {miles}-mile trip cost?",
            [f"{miles} / {per_gallon} = {gallons} gallons.", f"{gallons} * {price} = {gallons * price} dollars."],
            gallons * price)


def eggs(rng: Random, name: str) -> Made:
    hens, per_week, weeks = rng.randint(1, 6) * 12, rng.randint(3, 6), rng.randint(2, 4)
    laid = hens * per_week * weeks
    return (f"{name} keeps {hens} hens. Each hen lays {per_week} eggs a week. {name} packs {weeks} weeks of eggs "
            f"into cartons of 12. How many cartons does {name} fill?",
            [f"Each week: {hens} * {per_week} = {hens * per_week} eggs.",
             f"In {weeks} weeks: {hens * per_week} * {weeks} = {laid} eggs.",
             f"{laid} / 12 = {laid // 12} cartons."], laid // 12)


def water_tank(rng: Random, name: str) -> Made:
    rate, minutes = rng.randint(5, 30), rng.randint(6, 40)
    start = rng.randint(10, 200)
    full = start + rate * minutes
    return (f"A tank holds {full} liters and has {start} liters in it. {name}'s pump adds {rate} liters a minute. "
            "How many minutes until the tank is full?",
            [f"It needs {full} - {start} = {full - start} liters.", f"{full - start} / {rate} = {minutes} minutes."],
            minutes)


def cinema(rng: Random, name: str) -> Made:
    adult, child, adults, children = rng.randint(9, 16), rng.randint(4, 8), rng.randint(1, 3), rng.randint(1, 5)
    popcorn, popcorns = rng.randint(3, 7), rng.randint(1, 4)
    tickets = adult * adults + child * children
    return (f"Cinema tickets cost ${adult} for an adult and ${child} for a child. {name} buys tickets for "
            f"{adults} adults and {children} children, and {popcorns} popcorns at ${popcorn} each. How many dollars "
            f"does {name} spend?",
            [f"Tickets: {adults} * {adult} + {children} * {child} = {tickets}.",
             f"Popcorn: {popcorns} * {popcorn} = {popcorns * popcorn}.",
             f"In all {tickets} + {popcorns * popcorn} = {tickets + popcorns * popcorn}."],
            tickets + popcorns * popcorn)


def stamps(rng: Random, name: str) -> Made:
    own, times = rng.randint(10, 60), rng.randint(2, 5)
    brother = own * times
    fewer = rng.randint(1, brother - 1)
    return (f"{name} has {own} stamps. {name}'s brother has {times} times as many, and their sister has {fewer} "
            "fewer than the brother. How many stamps do the three have together?",
            [f"The brother has {own} * {times} = {brother}.",
             f"The sister has {brother} - {fewer} = {brother - fewer}.",
             f"Together {own} + {brother} + {brother - fewer} = {own + 2 * brother - fewer}."],
            own + 2 * brother - fewer)


def training(rng: Random, name: str) -> Made:
    monday = rng.randint(3, 12)
    less = rng.randint(1, 2 * monday - 1)
    return (f"{name} runs {monday} km on Monday, twice as far on Wednesday, and {less} km less than Wednesday on "
            f"Friday. How many km does {name} run on those three days?",
            [f"Wednesday: 2 * {monday} = {2 * monday} km.", f"Friday: {2 * monday} - {less} = {2 * monday - less} km.",
             f"Total: {monday} + {2 * monday} + {2 * monday - less} = {5 * monday - less} km."], 5 * monday - less)


def fence(rng: Random, name: str) -> Made:
    length, width, price = rng.randint(8, 40), rng.randint(5, 30), rng.randint(3, 15)
    around = 2 * (length + width)
    return (f"{name}'s yard is a rectangle {length} meters long and {width} meters wide. Fencing costs ${price} a "
            "meter. How many dollars does it cost to fence the whole yard?",
            [f"The distance around is 2 * ({length} + {width}) = {around} meters.",
             f"{around} * {price} = {around * price} dollars."], around * price)


def recipe(rng: Random, name: str) -> Made:
    servings, cups_per = rng.choice([2, 4, 6]), rng.randint(1, 3)
    factor = rng.randint(2, 6)
    return (f"A recipe for {servings} servings uses {servings * cups_per} cups of flour. {name} cooks "
            f"{servings * factor} servings. How many cups of flour does {name} need?",
            [f"Each serving needs {servings * cups_per} / {servings} = {cups_per} cups.",
             f"{servings * factor} * {cups_per} = {servings * factor * cups_per} cups."], servings * factor * cups_per)


def series(rng: Random, name: str) -> Made:
    minutes, per_day, days = rng.choice([20, 30, 40, 45, 60]), rng.randint(2, 4), rng.randint(2, 6)
    episodes = per_day * days
    while episodes * minutes % 60:
        days += 1
        episodes = per_day * days
    return (f"{name} watches {per_day} episodes a day of a series whose episodes last {minutes} minutes, and "
            f"finishes it in {days} days. How many hours long is the series?",
            [f"It has {per_day} * {days} = {episodes} episodes.",
             f"{episodes} * {minutes} = {episodes * minutes} minutes.",
             f"{episodes * minutes} / 60 = {episodes * minutes // 60} hours."], episodes * minutes // 60)


def candy(rng: Random, name: str) -> Made:
    kids = rng.randint(3, 9)
    candies = kids * rng.randint(4, 15) + rng.randint(1, kids - 1)
    return (f"{name} shares {candies} candies among {kids} children, giving each as many as possible but the same "
            f"number. {name} keeps the rest. How many candies does {name} keep?",
            [f"Each child gets {candies // kids}: {kids} * {candies // kids} = {kids * (candies // kids)} candies.",
             f"{name} keeps {candies} - {kids * (candies // kids)} = {candies % kids}."], candies % kids)


def rent(rng: Random, name: str) -> Made:
    mates = rng.randint(2, 5)
    share = rng.randint(300, 900)
    utilities = rng.randint(2, 15) * 10 * mates
    rent_total = share * mates - utilities
    return (f"{name} and {mates - 1} roommates pay ${rent_total} rent and ${utilities} for utilities each month, "
            "split equally. How many dollars does each pay a month?",
            [f"Together {rent_total} + {utilities} = {rent_total + utilities} dollars.",
             f"{rent_total + utilities} / {mates} = {share} dollars each."], share)


def train(rng: Random, name: str) -> Made:
    speed, hours, later = rng.randint(40, 120), rng.randint(2, 5), rng.randint(3, 9)
    return (f"{name}'s train covers {speed * hours} km in {hours} hours. At the same speed, how many km does it "
            f"cover in {later} hours?",
            [f"Its speed is {speed * hours} / {hours} = {speed} km an hour.",
             f"{speed} * {later} = {speed * later} km."],
            speed * later)


def wheels(rng: Random, name: str) -> Made:
    cars, motorbikes, bicycles = rng.randint(5, 40), rng.randint(2, 20), rng.randint(1, 15)
    return (f"In the car park where {name} works there are {cars} cars, {motorbikes} motorbikes and {bicycles} "
            "bicycles. How many wheels are there in all?",
            [f"Cars: {cars} * 4 = {cars * 4}.", f"Motorbikes and bicycles: ({motorbikes} + {bicycles}) * 2 = "
             f"{(motorbikes + bicycles) * 2}.", f"In all {cars * 4} + {(motorbikes + bicycles) * 2} = "
             f"{cars * 4 + (motorbikes + bicycles) * 2}."], cars * 4 + (motorbikes + bicycles) * 2)


TEMPLATES: tuple[Template, ...] = (
    bakery, savings, garden, road_trip, reading, pizza, stationery, ages, sale, overtime, school_bus, fuel, eggs,
    water_tank, cinema, stamps, training, fence, recipe, series, candy, rent, train, wheels)
