"""τ²-bench's retail and mock data models as pydantic classes (field names, types and order are the
benchmark's), used to check memrl's plain-dict databases and observations independently: a value
validated into these models and dumped must give memrl's string back."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel


class Variant(BaseModel):
    item_id: str
    options: dict[str, str]
    available: bool
    price: float


class Product(BaseModel):
    name: str
    product_id: str
    variants: dict[str, Variant]


class UserName(BaseModel):
    first_name: str
    last_name: str


class UserAddress(BaseModel):
    address1: str
    address2: str
    city: str
    country: str
    state: str
    zip: str


class _Method(BaseModel):
    source: str
    id: str


class CreditCard(_Method):
    source: Literal["credit_card"]
    brand: str
    last_four: str


class Paypal(_Method):
    source: Literal["paypal"]


class GiftCard(_Method):
    source: Literal["gift_card"]
    balance: float
    id: str


class User(BaseModel):
    user_id: str
    name: UserName
    address: UserAddress
    email: str
    payment_methods: dict[str, Union[CreditCard, GiftCard, Paypal]]
    orders: list[str]


class Fulfillment(BaseModel):
    tracking_id: list[str]
    item_ids: list[str]


class OrderItem(BaseModel):
    name: str
    product_id: str
    item_id: str
    price: float
    options: dict[str, str]


class OrderPayment(BaseModel):
    transaction_type: Literal["payment", "refund"]
    amount: float
    payment_method_id: str


class Order(BaseModel):
    order_id: str
    user_id: str
    address: UserAddress
    items: list[OrderItem]
    status: str
    fulfillments: list[Fulfillment]
    payment_history: list[OrderPayment]
    cancel_reason: Optional[str] = None
    exchange_items: Optional[list[str]] = None
    exchange_new_items: Optional[list[str]] = None
    exchange_payment_method_id: Optional[str] = None
    exchange_price_difference: Optional[float] = None
    return_items: Optional[list[str]] = None
    return_payment_method_id: Optional[str] = None


class RetailDB(BaseModel):
    products: dict[str, Product]
    users: dict[str, User]
    orders: dict[str, Order]


class MockTask(BaseModel):
    task_id: str
    title: str
    description: Optional[str] = None
    status: str


class MockUser(BaseModel):
    user_id: str
    name: str
    tasks: list[str]


class MockDB(BaseModel):
    tasks: dict[str, MockTask]
    users: dict[str, MockUser]
